"""The workloads, in the order they run. Each module has ``run(ctx) -> list[Row]``."""

NAMES = ("bandwidth", "gelu", "softmax", "layernorm", "transpose", "spectrum", "rotary", "depthwise", "conv",
         "dispatch", "matmul", "compile", "mlp_step", "loop", "aot", "distributed", "sendrecv", "remat_memory",
         "serving", "models")

# Workloads that move bytes through memory and so report a fraction of copy bandwidth.
NEEDS_BANDWIDTH = ("gelu", "softmax", "layernorm", "transpose", "depthwise", "rotary")
