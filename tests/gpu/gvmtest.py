"""Shared by the Python gpu tests (test_torch.py, test_torch_policy.py,
test_cupy.py): the parent never loads CUDA or the shim; it runs each job as
a child process of the same script (`script --child NAME JSON_ARGS`),
natively or with LD_PRELOAD=$GVM_TEST_LIB and GVM_STATS pointing at a
temporary file, and compares what the children report.

A child prints one line "RESULT <json>" and exits 0, or exits 77 with a
line "SKIP <reason>" (no module, no GPU, not enough memory).

LiveChild runs a child beside the parent instead, which steers it with
gvmctl at the barriers the child stops at (test_gvmctl_*.py).
"""
import json
import math
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
PYDIR = os.path.join(REPO, "python")
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


class Skip(Exception):
    """This case cannot run here; `everything` when no case can."""

    def __init__(self, reason, everything=False):
        super().__init__(reason)
        self.everything = everything


class Failure(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failure(msg)


def shim_lib():
    lib = os.environ.get("GVM_TEST_LIB") or os.path.join(REPO, "build", "preload", "libgvmshim.so")
    if not os.path.exists(lib):
        raise Failure("libgvmshim.so not found at %s (set GVM_TEST_LIB or build first)" % lib)
    return lib


def host_available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * KiB
    except (OSError, ValueError, IndexError):
        pass
    return None


# ---- the parent side ---------------------------------------------------------


class ChildResult:
    def __init__(self, result, stats, output, seconds):
        self.result = result
        self.stats = stats
        self.output = output
        self.seconds = seconds


def child_env(shim, env=None, stats_path=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GVM_") or k.startswith("GVM_TEST_")}
    e.pop("LD_PRELOAD", None)
    e["PYTHONPATH"] = PYDIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["GVM_TEST_PYDIR"] = PYDIR
    # Deterministic cuBLAS (use_deterministic_algorithms asks for it).
    e["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    e["PYTHONUNBUFFERED"] = "1"
    if shim:
        e["LD_PRELOAD"] = shim_lib()
        if stats_path:
            e["GVM_STATS"] = stats_path
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


def tail(text, n=40):
    lines = text.strip().splitlines()
    return "\n".join(lines[-n:])


_runs = {}


def once(key, fn):
    """fn() the first time `key` is asked for in this process (a child run
    is costly and several cases compare against the same one); a Skip or
    Failure it raised is raised again for every later case."""
    if key not in _runs:
        try:
            _runs[key] = fn()
        except (Skip, Failure) as e:
            _runs[key] = e
    if isinstance(_runs[key], Exception):
        raise _runs[key]
    return _runs[key]


def run_child(script, name, args=None, shim=False, env=None, timeout=240, label=None):
    """Runs `script --child name json(args)`; returns a ChildResult.
    Raises Skip when the child exits 77, Failure on any other problem."""
    label = label or ("%s (%s)" % (name, "shim" if shim else "native"))
    tmpdir = tempfile.mkdtemp(prefix="gvmtest-")
    stats_path = os.path.join(tmpdir, "stats.json") if shim else None
    cmd = [sys.executable, os.path.abspath(script), "--child", name, json.dumps(args or {})]
    e = child_env(shim, env, stats_path)
    shown = " ".join("%s=%s" % (k, v) for k, v in sorted((env or {}).items()) if v is not None)
    print("  run %s%s" % (label, (": " + shown) if shown else ""))
    sys.stdout.flush()
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as ex:
        out = (ex.output or b"").decode("utf-8", "replace")
        raise Failure("%s ran past %d s and was killed\n%s" % (label, timeout, tail(out)))
    secs = time.time() - t0
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode == 77:
        reason = "skipped"
        for line in out.splitlines():
            if line.startswith("SKIP "):
                reason = line[5:].strip()
        raise Skip("%s: %s" % (label, reason), everything=reason.startswith(("no torch", "no cupy", "no GPU")))
    if p.returncode != 0:
        how = "killed by signal %d" % -p.returncode if p.returncode < 0 else "exit status %d" % p.returncode
        raise Failure("%s failed (%s):\n%s" % (label, how, tail(out)))
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    if result is None:
        raise Failure("%s printed no RESULT line:\n%s" % (label, tail(out)))
    stats = None
    if stats_path:
        if not os.path.exists(stats_path):
            raise Failure("%s: the shim wrote no stats (%s)\n%s" % (label, stats_path, tail(out)))
        with open(stats_path) as f:
            stats = json.load(f)
        os.unlink(stats_path)
    try:
        os.rmdir(tmpdir)
    except OSError:
        pass
    print("    done in %.1f s" % secs)
    return ChildResult(result, stats, out, secs)


def compare_series(a, b, rel=1e-6, what="values"):
    """Equal lengths and every pair within rel (relative to the larger)."""
    expect(len(a) == len(b), "%s: %d vs %d entries" % (what, len(a), len(b)))
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, str):
            x = float.fromhex(x)
        if isinstance(y, str):
            y = float.fromhex(y)
        expect(math.isfinite(x) and math.isfinite(y), "%s[%d]: %r vs %r (not finite)" % (what, i, x, y))
        d = abs(x - y) / max(abs(x), abs(y), 1e-30)
        worst = max(worst, d)
        expect(d <= rel, "%s[%d]: %r vs %r (relative difference %.3g > %g)" % (what, i, x, y, d, rel))
    return worst


def stat(stats, dotted):
    v = stats
    for part in dotted.split("."):
        if not isinstance(v, dict):
            raise Failure("stats: %s is not an object" % dotted)
        v = v.get(part, 0)
    return v


class Runner:
    def __init__(self, title):
        self.title = title
        self.passed = self.failed = self.skipped = 0
        self.all_skip = None

    def run(self, name, fn):
        sys.stdout.flush()
        if self.all_skip:
            print("SKIP %s: %s" % (name, self.all_skip))
            self.skipped += 1
            return
        print("---- %s" % name)
        sys.stdout.flush()
        try:
            fn()
            print("PASS %s" % name)
            self.passed += 1
        except Skip as s:
            print("SKIP %s: %s" % (name, s))
            self.skipped += 1
            if s.everything:
                self.all_skip = str(s)
        except Failure as f:
            print("FAIL %s: %s" % (name, f))
            self.failed += 1
        except Exception:
            print("FAIL %s: unexpected error\n%s" % (name, traceback.format_exc()))
            self.failed += 1
        sys.stdout.flush()

    def finish(self):
        if self.skipped:
            print("(%d skipped)" % self.skipped)
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.stdout.flush()
        if self.failed:
            return 1
        return 0 if self.passed else 77


def suite_main(title, module, handlers, cases):
    """The parent side of a suite: dispatch a child, or skip without the
    module, or run every (name, function) of cases."""
    import importlib.util
    if child_main(handlers):
        return 0
    if importlib.util.find_spec(module) is None:
        skip_whole_test("no %s (import %s fails)" % (module, module))
    try:
        shim_lib()
    except Failure as e:
        print("FAIL setup: %s" % e)
        print("0 passed, 1 failed")
        return 1
    r = Runner(title)
    # GVM_TEST_CASES=a,b runs only those (to rerun a few cases quickly).
    only = [c for c in os.environ.get("GVM_TEST_CASES", "").split(",") if c]
    for name, fn in cases:
        if not only or name in only:
            r.run(name, fn)
    return r.finish()


def skip_whole_test(reason):
    print("SKIP: %s" % reason)
    print("0 passed, 0 failed")
    sys.stdout.flush()
    sys.exit(77)


# ---- the child side ------------------------------------------------------------


class ChildSkip(Exception):
    pass


def child_skip(reason):
    raise ChildSkip(reason)


def torch_or_skip():
    """torch in a child, set up for results that repeat bit for bit."""
    try:
        import torch
    except ImportError:
        child_skip("no torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        child_skip("no GPU (torch.cuda.is_available() is False)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    return torch


def child_main(handlers):
    """Dispatches `--child NAME JSON` to handlers[NAME](args) and prints its
    result. Returns True when this process was a child (it then exits)."""
    if len(sys.argv) < 3 or sys.argv[1] != "--child":
        return False
    name = sys.argv[2]
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    pydir = os.environ.get("GVM_TEST_PYDIR")
    if pydir and pydir not in sys.path:
        sys.path.insert(0, pydir)
    try:
        result = handlers[name](args)
    except ChildSkip as s:
        print("SKIP %s" % s)
        sys.stdout.flush()
        os._exit(77)
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(1)
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    sys.exit(0)


def gvm_info_dict(info):
    d = info.as_dict()
    for k in ("base", "chunk_base"):
        d[k] = int(d[k] or 0)
    return d


# ---- a job steered from outside while it runs (the gvmctl tests) --------------


def gvmctl_path():
    """The gvmctl that meson built (GVM_TEST_GVMCTL), else build/tools/gvmctl."""
    p = os.environ.get("GVM_TEST_GVMCTL") or os.path.join(REPO, "build", "tools", "gvmctl")
    if not os.access(p, os.X_OK):
        raise Failure("gvmctl not found at %s (set GVM_TEST_GVMCTL or build first)" % p)
    return p


def gvmctl_has(command):
    """Whether this gvmctl's manual lists `gvmctl COMMAND` in its synopsis."""
    p = subprocess.run([gvmctl_path(), "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    text = p.stdout.decode("utf-8", "replace")
    return any(line.split()[:2] == ["gvmctl", command] for line in text.splitlines())


class LiveChild:
    """`script --child NAME JSON` running beside the parent, which steers it
    with gvmctl between its phases. At each barrier() the child prints
    "AT NAME {json}" and obeys the parent on its stdin: "measure" (it prints
    "MEASURE {json}") until "go". Its control socket lives in a runtime
    directory of its own, so gvmctl sees this job only."""

    def __init__(self, script, name, args=None, shim=False, env=None, timeout=240, label=None):
        self.label = label or ("%s (%s)" % (name, "shim" if shim else "native"))
        self.shim = shim
        self.runtime = tempfile.mkdtemp(prefix="gvmctl-run-")
        self.stats_path = os.path.join(self.runtime, "stats.json") if shim else None
        e = child_env(shim, env, self.stats_path)
        e["XDG_RUNTIME_DIR"] = self.runtime
        cmd = [sys.executable, os.path.abspath(script), "--child", name, json.dumps(args or {})]
        shown = " ".join("%s=%s" % (k, v) for k, v in sorted((env or {}).items()) if v is not None)
        print("  start %s%s" % (self.label, (": " + shown) if shown else ""))
        sys.stdout.flush()
        self.t0 = time.time()
        self.deadline = self.t0 + timeout
        self.lines = []
        self._queue = queue.Queue()
        self.proc = subprocess.Popen(cmd, env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self):
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def output(self):
        return "\n".join(self.lines)

    def _ended(self, waiting_for):
        rc = self.proc.wait()
        if rc == 77:
            reason = "skipped"
            for line in self.lines:
                if line.startswith("SKIP "):
                    reason = line[5:].strip()
            raise Skip("%s: %s" % (self.label, reason), everything=reason.startswith(("no torch", "no GPU")))
        how = "killed by signal %d" % -rc if rc < 0 else "exit status %d" % rc
        raise Failure("%s ended (%s) while the test waited for %s:\n%s" % (self.label, how, waiting_for,
                                                                          tail(self.output())))

    def _wait_line(self, prefix):
        while True:
            left = self.deadline - time.time()
            try:
                line = self._queue.get(timeout=max(left, 0.01))
            except queue.Empty:
                self.kill()
                raise Failure("%s: no '%s' within its time limit\n%s" % (self.label, prefix.strip(),
                                                                        tail(self.output())))
            if line is None:
                self._ended("'%s'" % prefix.strip())
            if line.startswith(prefix):
                return line[len(prefix):]

    def _send(self, text):
        try:
            self.proc.stdin.write((text + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._ended("it to read '%s'" % text)

    def at(self, barrier):
        """Waits until the child reaches `barrier`; returns what it said there."""
        rest = self._wait_line("AT %s " % barrier)
        return json.loads(rest)

    def measure(self):
        self._send("measure")
        return json.loads(self._wait_line("MEASURE "))

    def go(self):
        self._send("go")

    def ctl(self, *args, quiet=False):
        """Runs `gvmctl ARGS...` where it sees this job; prints it (with its
        output unless quiet) and returns (exit status, stdout, stderr)."""
        cmd = [gvmctl_path()] + [str(a) for a in args]
        e = dict(os.environ, XDG_RUNTIME_DIR=self.runtime)
        t0 = time.time()
        try:
            p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        except subprocess.TimeoutExpired:
            raise Failure("gvmctl %s ran past 120 s" % " ".join(cmd[1:]))
        out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        shown = " | ".join(l for l in (out + err).strip().splitlines() if l.strip())
        if len(shown) > 400:
            shown = shown[:400] + "..."
        if quiet:
            shown = "(%d bytes of output)" % len(out + err)
        print("  $ gvmctl %s -> exit %d in %.2f s: %s" % (" ".join(cmd[1:]), p.returncode, time.time() - t0, shown))
        sys.stdout.flush()
        return p.returncode, out, err

    def finish(self):
        """Waits for the child's RESULT and exit; returns a ChildResult."""
        rest = self._wait_line("RESULT ")
        try:
            rc = self.proc.wait(timeout=max(self.deadline - time.time(), 1))
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure("%s printed its result but did not exit" % self.label)
        self._reader.join(10)
        if rc != 0:
            raise Failure("%s: exit status %d after its result\n%s" % (self.label, rc, tail(self.output())))
        stats = None
        if self.stats_path:
            if not os.path.exists(self.stats_path):
                raise Failure("%s: the shim wrote no stats\n%s" % (self.label, tail(self.output())))
            with open(self.stats_path) as f:
                stats = json.load(f)
        secs = time.time() - self.t0
        print("    done in %.1f s" % secs)
        self.cleanup()
        return ChildResult(json.loads(rest), stats, self.output(), secs)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.runtime, ignore_errors=True)


def barrier(name, info=None, measure=None):
    """The child side of LiveChild: says where it is and serves the
    parent's "measure" requests until it says "go"."""
    print("AT %s %s" % (name, json.dumps(info or {})))
    sys.stdout.flush()
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "go":
            return
        if cmd != "measure":
            raise RuntimeError("unknown request %r at barrier %s" % (cmd, name))
        print("MEASURE " + json.dumps(measure() if measure else {}))
        sys.stdout.flush()
    raise RuntimeError("the parent closed stdin at barrier %s" % name)
