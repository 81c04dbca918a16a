"""Run a program as N local processes that form one nexar world.

    python -m nexar.run -n 4 script.py [args...]
    python -m nexar.run -n 4 -m package.module [args...]
    python -m nexar.run -n 4 -- program [args...]
    python -m nexar.run -n 4 --bind-to core script.py   # rank i on core i

This is the launcher nexar-run, which the package ships (nexar/bin/nexar-run,
next to libnexar.so.0), run under the name ``nexar.run``: a script or a
module runs under this interpreter, any other program as given, and every
option is nexar-run's (``python -m nexar.run --help`` lists them). It starts
a seed on 127.0.0.1 with a fresh random cluster token and gives each rank
NEXAR_SEED, NEXAR_RANK, NEXAR_WORLD_SIZE, NEXAR_CLUSTER_TOKEN,
NEXAR_LOCAL_RANK and NEXAR_LOCAL_WORLD_SIZE (the program calls
``nexar.init()``). Every line a rank prints is prefixed with ``[rN]``. When a
rank exits non-zero (an unhandled exception) or is killed, the others get
SIGTERM, then SIGKILL after the grace period, and the launcher exits with that
rank's status, naming it. Exit status: 0 when every rank exited 0; the first
failing rank's status (128 + signal when killed); 1 when the world did not
form; 2 on a usage error (including a listen address or formation timeout the
seed refuses).
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional, Sequence

_NAME = "nexar.run"

_USAGE = f"""\
usage: python -m {_NAME} [options] script.py [args...]
       python -m {_NAME} [options] -m package.module [args...]
       python -m {_NAME} [options] -- program [args...]

A script or a module runs under this interpreter, {sys.executable}.
Every option is nexar-run's:
"""


def launcher() -> Optional[str]:
    """The nexar-run this package runs: its own (shipped next to the library
    it was built with), else the first on PATH; None when there is none."""
    own = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "nexar-run")
    if os.access(own, os.X_OK):
        return own
    return shutil.which("nexar-run")


def launcher_args(argv: Sequence[str]) -> List[str]:
    """nexar-run's arguments for ours: the options as they are, then "--" and
    the program, a script or a module run by this interpreter. Every option
    of nexar-run but --help takes one value."""
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return args
        if a == "-m" or a.endswith(".py"):
            return args[:i] + ["--", sys.executable] + args[i:]
        if not a.startswith("-"):
            return args[:i] + ["--"] + args[i:]
        i += 1 if a in ("-h", "--help") else 2
    return args  # no program: nexar-run says so


def _asks_for_help(args: List[str]) -> bool:
    options = args[:args.index("--")] if "--" in args else args
    return "-h" in options or "--help" in options


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = launcher_args(sys.argv[1:] if argv is None else argv)
    tool = launcher()
    if tool is None:
        print(f"{_NAME}: nexar-run is neither in this package nor on PATH", file=sys.stderr)
        return 127
    if _asks_for_help(args):
        sys.stdout.write(_USAGE)
    # An unhandled exception ends a rank at once (nexar.init()'s hook): the
    # launcher stops the others when the first rank ends, and names that one.
    env = dict(os.environ, NEXAR_RUN_LAUNCHER="python")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(tool, [_NAME, *args], env)
    except OSError as e:
        print(f"{_NAME}: cannot run {tool}: {e}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main())
