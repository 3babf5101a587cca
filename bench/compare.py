"""flowjit at two commits, timed side by side: ``python -m bench.compare BASE [HEAD]``.

    python -m bench.compare 1b92f9d            # that commit against HEAD
    python -m bench.compare HEAD~3 .           # against the working tree as it is (uncommitted edits too)
    python -m bench.compare main HEAD --rounds 7 --record bench/results/<name>.md
    python -m bench.compare HEAD . --quick --only dispatch,gelu   # a smoke run

Each revision is checked out into a temporary ``git worktree add --detach``; ``.`` (the
working tree this file lives in, uncommitted edits included) is copied (its ``flowjit/``) at
the start, so that edits made while the run goes on reach neither side; both are removed
afterwards. Both trees are timed by the
same script, ``bench/compare_child.py`` of this tree, passed by path: it puts the tree under
test first on ``sys.path``, so each side runs its own flowjit, and writes its workloads with
flowjit's public API only, so it runs on commits from before and after an API-internal change
(the numba backend's removal, ``codegen_llvm`` renamed ``codegen_cpu``). Every call uses the
default backend.

Timing: ``--rounds`` rounds; each starts one new child process per tree (a fresh, empty
``FLOWJIT_CACHE_DIR`` each, so the first calls are cold: trace, compile, run), the two set up
one after the other. Then, workload after workload, the two children are asked for blocks of
samples in turn (``--blocks`` blocks per workload and round, the order flipped from block to
block and from round to round: base, head, head, base, ...), a short pause before each block
so that the other's thread pool is idle. A sample is ``inner`` calls (about 20 ms), and a round
gives each tree ``--samples`` samples per workload (at least 11 unless ``--quick``), so a busy
spell of a shared machine falls on both trees alike. A cell is the median over every sample of
every round; head/base is head's median over base's (above 1: head is slower), and "per round"
is the range of that ratio over the rounds' own medians, a measure of the noise. The first
calls (cold) and ``import flowjit`` get one sample per round each. A row whose head/base is
above ``--threshold`` (1.05) is flagged.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):          # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.run import THREAD_VARS, Load, cpu_model, table  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = os.path.join(ROOT, "bench", "compare_child.py")
WORKTREE = "."                         # the revision name that means this working tree, as it is
FIRST_CALLS = ("gelu", "softmax", "mlp_step")   # first-call rows, as the bench's compile and mlp_step have
TIMEOUT_S = 900                        # one reply of a child


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("base", help="the revision to compare against (a commit, tag or branch; '.': the working tree)")
    p.add_argument("head", nargs="?", default="HEAD", help="the revision under test (default HEAD; '.': the "
                                                           "working tree with its uncommitted edits)")
    p.add_argument("--rounds", type=int, default=None, help="rounds, each with new processes (default 5; 2 quick)")
    p.add_argument("--samples", type=int, default=None,
                   help="samples per workload, tree and round (default 12; 4 quick)")
    p.add_argument("--blocks", type=int, default=None,
                   help="blocks per workload and round, trees alternated (default 4; 2 quick)")
    p.add_argument("--only", default="", help="comma-separated workloads (default: all; see the list below)")
    p.add_argument("--quick", action="store_true", help="small sizes and few samples: a smoke run")
    p.add_argument("--threads", type=int, default=2, help="threads for flowjit and BLAS (default 2)")
    p.add_argument("--threshold", type=float, default=1.05, help="flag rows whose head/base is above (default 1.05)")
    p.add_argument("--record", default="", help="also write the report to this file (markdown)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a row is flagged or failed")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.samples = args.samples or (4 if args.quick else 12)
    args.blocks = min(args.blocks or (2 if args.quick else 4), args.samples)
    if min(args.rounds, args.samples, args.blocks) < 1:
        p.error("--rounds, --samples and --blocks must be at least 1")
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    return args


# ---- the trees --------------------------------------------------------------------------------
def git(*args: str, cwd: str = ROOT) -> str:
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout.strip()


class Tree:
    """A source tree to time: this working tree (``.``) or a revision checked out into a
    temporary worktree."""

    def __init__(self, rev: str, scratch: str, role: str):
        self.rev, self.role = rev, role
        self.worktree = None
        head = git("rev-parse", "--short", "HEAD")
        if rev == WORKTREE:
            # A copy of flowjit/ as it is now: edits made while the run goes on reach neither side.
            self.path = os.path.join(scratch, f"{role}-working-tree")
            for rel in git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "flowjit").split("\0"):
                src = os.path.join(ROOT, rel)
                if rel and os.path.isfile(src):
                    os.makedirs(os.path.dirname(os.path.join(self.path, rel)), exist_ok=True)
                    shutil.copy2(src, os.path.join(self.path, rel))
            dirty = git("status", "--porcelain", "--", "flowjit")
            self.commit = head + ("+edits" if dirty else "")       # the table's column header
            self.name = f"working tree ({head}{' + uncommitted flowjit/ edits' if dirty else ''}; flowjit/ copied " \
                        "at the start)"
        else:
            self.commit = git("rev-parse", "--short", f"{rev}^{{commit}}")
            self.path = os.path.join(scratch, f"{role}-{self.commit}")
            git("worktree", "add", "--detach", self.path, self.commit)
            self.worktree = self.path
            self.name = self.commit if self.commit.startswith(rev) or rev.startswith(self.commit) else \
                f"{rev} ({self.commit})"
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(self.path, "flowjit")],
                       env=child_env(scratch, 0), capture_output=True, timeout=600)

    def remove(self) -> None:
        if self.worktree:
            subprocess.run(["git", "worktree", "remove", "--force", self.worktree], cwd=ROOT,
                           capture_output=True, timeout=120)
            self.worktree = None


def child_env(scratch: str, threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "FLOWJIT_BACKEND", "FLOWJIT_INTERPRET"):
        env.pop(var, None)
    if threads:
        for var in THREAD_VARS + ("NUMBA_NUM_THREADS",):    # the base may be a commit that still used numba
            env[var] = str(threads)
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


class Child:
    """One tree's child process (``script TREE``, bench/compare_child.py unless told), spoken to
    a JSON line at a time."""

    def __init__(self, tree: Tree, scratch: str, threads: int, label: str, script: str = CHILD):
        self.tree = tree
        cache = tempfile.mkdtemp(prefix=f"cache-{label}-", dir=scratch)
        env = child_env(scratch, threads)
        env["FLOWJIT_CACHE_DIR"] = cache
        env["PYTHONPATH"] = tree.path
        self.log = open(os.path.join(scratch, f"{label}.stderr"), "w")
        self.proc = subprocess.Popen([sys.executable, script, tree.path], cwd=cache, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)

    def ask(self, **req) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=TIMEOUT_S)
            self.log.flush()
            with open(self.log.name) as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"the {self.tree.role} child ({self.tree.name}) exited {self.proc.returncode}:\n{tail}")
        reply = json.loads(line)
        if "fatal" in reply:
            raise RuntimeError(reply["fatal"])
        return reply

    def close(self) -> None:
        try:
            self.ask(cmd="quit") if self.proc.poll() is None else None
        except Exception:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# ---- the run ----------------------------------------------------------------------------------
def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.2f} s"


def run(args: argparse.Namespace, log=lambda msg: print(msg, file=sys.stderr, flush=True)) -> dict:
    """Time both trees; returns the measurements (see ``report``)."""
    scratch = tempfile.mkdtemp(prefix="bench_compare_")
    trees: list[Tree] = []
    try:
        for rev, role in ((args.base, "base"), (args.head, "head")):
            log(f"compare: {role} {rev}")
            trees.append(Tree(rev, scratch, role))
        # samples[role][workload] = per-round lists; first-call rows are keyed "first:<name>"
        samples: dict[str, dict[str, list[list[float]]]] = {"base": {}, "head": {}}
        labels: dict[str, str] = {}
        errors: dict[tuple[str, str], str] = {}
        inner: dict[str, dict[str, int]] = {"base": {}, "head": {}}
        where: dict[str, str] = {}
        per_block = [args.samples // args.blocks + (1 if b < args.samples % args.blocks else 0)
                     for b in range(args.blocks)]
        gap = 0.02 if args.quick else 0.15
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            children: dict[str, Child] = {}
            try:
                ready: dict[str, dict] = {}
                for tree in order:
                    log(f"compare: round {r + 1}/{args.rounds}: set up {tree.role} ({tree.name})")
                    child = children[tree.role] = Child(tree, scratch, args.threads, f"{tree.role}-{r}")
                    ready[tree.role] = rep = child.ask(cmd="setup", quick=args.quick, only=args.only or None,
                                                      target_s=0.002 if args.quick else 0.02)
                    where[tree.role] = rep["flowjit"]
                    labels.update(rep["labels"])
                    inner[tree.role].update(rep["inner"])
                    for name, text in rep["errors"].items():
                        errors.setdefault((tree.role, name), text)
                    bucket = samples[tree.role]
                    bucket.setdefault("import", []).append([rep["import_s"]])
                    for name, s in rep["first"].items():
                        bucket.setdefault(f"first:{name}", []).append([s])
                names = [n for n in labels if any(n in rep["inner"] for rep in ready.values())]
                for name in names:
                    log(f"compare: round {r + 1}/{args.rounds}: {labels[name]}")
                    got = {t.role: [] for t in trees}
                    for b, k in enumerate(per_block):
                        for tree in (order if b % 2 == 0 else order[::-1]):
                            if k == 0 or (tree.role, name) in errors:
                                continue
                            rep = children[tree.role].ask(cmd="time", name=name, samples=k, gap_s=gap)
                            if "error" in rep:
                                errors[(tree.role, name)] = rep["error"]
                            else:
                                got[tree.role] += rep["samples"]
                    for role, xs in got.items():
                        if xs:
                            samples[role].setdefault(name, []).append(xs)
            finally:
                for child in children.values():
                    child.close()
        return {"trees": {t.role: t.name for t in trees}, "commits": {t.role: t.commit for t in trees},
                "samples": samples, "labels": labels, "errors": errors, "inner": inner, "where": where}
    finally:
        for tree in trees:
            tree.remove()
        shutil.rmtree(scratch, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True, timeout=120)


def rows(result: dict, threshold: float) -> list[dict]:
    """One dict per row: label, base, head (median seconds), ratio, per-round range, n, flag."""
    out = []
    samples, labels = result["samples"], result["labels"]
    keys = list(labels) + ["import"] + [f"first:{n}" for n in labels if n in FIRST_CALLS]
    for key in keys:
        if key == "import":
            label = "import flowjit (new process)"
        elif key.startswith("first:"):
            label = f"first call, cold cache: {labels[key[6:]]}"
        else:
            label = labels[key]
        base, head = samples["base"].get(key, []), samples["head"].get(key, [])
        err = [f"{role}: {result['errors'][(role, key)]}" for role in ("base", "head")
               if (role, key) in result["errors"]]
        mb = statistics.median([x for xs in base for x in xs]) if base else None
        mh = statistics.median([x for xs in head for x in xs]) if head else None
        row = {"key": key, "label": label, "base": mb, "head": mh, "ratio": None, "range": "", "flag": "",
               "n": f"{sum(map(len, base))}/{sum(map(len, head))}"}
        if mb and mh:
            row["ratio"] = mh / mb
            per_round = [statistics.median(h) / statistics.median(b) for b, h in zip(base, head)]
            row["range"] = f"{min(per_round):.3f}–{max(per_round):.3f}" if len(per_round) > 1 else ""
            if row["ratio"] > threshold:
                row["flag"] = f"SLOWER (>{100 * (threshold - 1):.0f}%)"
        if err:
            row["flag"] = "ERROR " + "; ".join(err)
        out.append(row)
    return out


def report(args: argparse.Namespace, result: dict, started: datetime.datetime, elapsed: float,
           load: str) -> tuple[str, list[dict]]:
    trees, where = result["trees"], result["where"]
    body = rows(result, args.threshold)
    cmd = "python -m bench.compare " + " ".join(sys.argv[1:] if args.argv is None else args.argv)
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        mem = "unknown"
    lines = [f"# flowjit at two commits, side by side, {started:%Y-%m-%d %H:%M}", "",
             f"`{cmd.strip()}` (took {elapsed:.0f} s)", "",
             f"- base: {trees['base']}; head: {trees['head']}",
             f"- flowjit imported from: base {where.get('base', '?')}, head {where.get('head', '?')} (a revision: "
             "a temporary git worktree; '.': a copy of the working tree's flowjit/; both removed after the run)",
             f"- CPU: {cpu_model()}; {os.cpu_count()} logical cores; memory {mem}",
             f"- OS: {platform.platform()}; Python {platform.python_version()}",
             f"- Threads: {args.threads} (FLOWJIT_NUM_THREADS, OMP/MKL/OpenBLAS); default backend on both sides",
             f"- {args.rounds} rounds × {args.samples} samples per workload and tree, in {args.blocks} blocks "
             f"alternated between the trees{'; quick sizes' if args.quick else ''}",
             f"- Load from other processes during the run: {load} of the machine; load average at the end "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""]
    heads = ["workload", f"base {result['commits']['base']}", f"head {result['commits']['head']}", "head/base",
             "per round", "samples (base/head)", "flag"]
    lines += table(heads, [[r["label"], fmt(r["base"]), fmt(r["head"]),
                            f"{r['ratio']:.3f}" if r["ratio"] is not None else "—", r["range"] or "—", r["n"],
                            r["flag"]] for r in body])
    slower = [r["label"] for r in body if r["flag"].startswith("SLOWER")]
    lines += ["", "Cells: the median seconds per call over every sample of every round (a sample: the mean of "
              "`inner` back-to-back calls, about 20 ms); head/base above 1: head is slower; per round: the "
              "range of head/base over the rounds' own medians. First calls and the import: one sample per "
              "round, each in a new process with an empty FLOWJIT_CACHE_DIR.", "",
              f"Flagged (head/base > {args.threshold}): {', '.join(slower) if slower else 'none'}.", ""]
    return "\n".join(lines), body


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = argv
    started = datetime.datetime.now()
    t0 = time.perf_counter()
    load = Load()
    result = run(args)
    text, body = report(args, result, started, time.perf_counter() - t0, load.others())
    print(text)
    if args.record:
        with open(args.record, "w") as f:
            f.write(text.rstrip() + "\n")
        print(f"compare: recorded {args.record}", file=sys.stderr)
    bad = [r for r in body if r["flag"]]
    return 1 if args.strict and bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
