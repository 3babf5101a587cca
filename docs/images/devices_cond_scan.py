import flowjit as fj


def step(x, w, xs):
    h = fj.tanh(x @ w)                      # matmul, then one kernel
    with fj.device("cpu:1"):                # this part on a second device: send/recv pairs
        g = fj.cond(h.sum() > 0, lambda a: a * 2, lambda a: a - 1, fj.nn.softmax(h, axis=-1))
    c, ys = fj.scan(lambda c, t: (c + t, c.sum()), g[0], xs)
    return c, ys
