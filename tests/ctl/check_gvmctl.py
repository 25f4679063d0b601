"""gvmctl as a user meets it, against a program running under the shim
with the simulated driver:

    check_gvmctl.py GVMCTL SHIM SIM_DIR TARGET GVM_CONFIG_TOOL
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

gvmctl, shim, simdir, target, gvm_config = sys.argv[1:6]
runtime = tempfile.mkdtemp(prefix="gvmctl-")
env = {k: v for k, v in os.environ.items() if not k.startswith("GVM_")}
env.update(XDG_RUNTIME_DIR=runtime, SIMCUDA_DEVICES="2", SIMCUDA_MEM="256M", SIMCUDA_HOST_MEM="1G",
           GVM_POOL_LIMIT="0", GVM_CACHE_LIMIT="0")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def ctl(*args, expect=0):
    p = subprocess.run([gvmctl] + [str(a) for a in args], env=env, capture_output=True, text=True, timeout=60)
    check(p.returncode == expect, "gvmctl %s: exit %d (wanted %d): %s%s" %
          (" ".join(map(str, args)), p.returncode, expect, p.stdout[-300:], p.stderr[-300:]))
    return p


proc = subprocess.Popen([target], env=dict(env, LD_PRELOAD=shim, LD_LIBRARY_PATH=simdir), stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True)


def ask(cmd):
    proc.stdin.write(cmd + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


try:
    check(proc.stdout.readline().strip() == "ready", "the target started")
    pid = proc.pid

    # list, text and JSON.
    out = ctl("list").stdout
    check(str(pid) in out and "ctl-target" in out and "dev0" in out, "list shows the process: %s" % out)
    procs = json.loads(ctl("list", "--json").stdout)
    me = [p for p in procs if p["pid"] == pid]
    check(len(me) == 1, "list --json has the process once: %s" % procs)
    dev0 = me[0]["devices"][0] if me else {}
    check(dev0.get("home", 0) >= 48 << 20, "both allocations at home on dev0: %s" % dev0)
    held_before = dev0.get("held", 0)

    # stats, live.
    stats = json.loads(ctl("stats", pid, "--json").stdout)
    check(stats["allocations_total"] == 2, "live stats: %s allocations" % stats.get("allocations_total"))
    check("allocations_total" in ctl("stats", pid).stdout, "text stats")

    # set: live options. Refusals first: one line, exit 1, nothing changed.
    def limit0():
        return json.loads(ctl("stats", pid, "--json").stdout)["limit"]["0"]

    def dev0_now():
        return [p for p in json.loads(ctl("list", "--json").stdout) if p["pid"] == pid][0]["devices"][0]

    err = ctl("set", pid, "device_limit=16M", expect=1).stderr
    check(err == "gvmctl: process %d: device_limit=16M: device 0 holds 48.0 MiB and spill is off; nothing changed\n"
          % pid, "a lower limit with spill off is refused: %s" % err)
    check(limit0() is None, "the limit is unchanged (none)")
    err = ctl("set", pid, "block_size=4M", expect=1).stderr
    check(err.endswith(": block_size cannot change while the process runs: set it at start\n"),
          "an option that holds from the start is refused with the reason: %s" % err)
    # The config parser's own message: what GVM_DEVICE_LIMIT=2X gets at start.
    start_err = subprocess.run([gvm_config, "--check"], env=dict(env, GVM_DEVICE_LIMIT="2X"), capture_output=True,
                               text=True).stderr
    why = start_err.split("GVM_DEVICE_LIMIT='2X': ", 1)[-1]
    err = ctl("set", pid, "device_limit=2X", expect=1).stderr
    check(why.strip() and err == "gvmctl: process %d: device_limit = 2X: %s" % (pid, why),
          "a bad value reads as the parser says: %r vs %r" % (err, start_err))
    err = ctl("set", pid, "spill=host", "device_limit=0:32M", "promote_rate=0", expect=1).stderr
    check("promote_rate = 0: must be more than 0" in err, "the bad item is named: %s" % err)
    check(limit0() is None and ask("where") == "0" and dev0_now()["on_host"] == 0,
          "all or nothing: no limit, nothing moved")
    err = ctl("set", pid, "device_limt=1G", expect=1).stderr
    check("unknown option 'device_limt' (did you mean 'device_limit'?)" in err, "unknown option: %s" % err)
    ctl("set", pid, expect=2)
    check("expected KEY=VALUE" in ctl("set", pid, "spill", expect=2).stderr, "KEY=VALUE asked for")
    err = ctl("set", 4194000, "spill=host", expect=1).stderr
    check(err.startswith("gvmctl: no process"), "set on an absent pid: %s" % err)

    # Launches pass unscanned while spill is off; spill turned on live scans them.
    def scanned():
        return json.loads(ctl("stats", pid, "--json").stdout)["launches_scanned"]
    check(ask("launch") == "ok" and scanned() == 0, "spill off: a launch runs, not scanned")

    # Lowering the limit evicts down to it, data intact; raising it brings the data back.
    out = ctl("set", pid, "spill=host", "device_limit=0:32M").stdout
    check("spill: off -> host\n" in out and "device_limit: none -> 0:32M\n" in out and
          re.search(r"device 0: moved 24\.0 MiB out in [0-9.]+ s \([0-9.]+ GB/s\); holds 24\.0 MiB, limit 32\.0 MiB\n", out),
          "set says what changed: %s" % out)
    dev0 = dev0_now()
    check(dev0["held"] <= 32 << 20 and dev0["on_host"] == 24 << 20 and limit0() == 32 << 20,
          "held within the new limit: %s" % dev0)
    check(ask("check") == "ok", "data intact after the eviction")
    check(ask("launch") == "ok" and scanned() == 1, "spill on live: the launch hook given at start scans")
    check(ask("check") == "ok", "data intact after the launch")
    out = ctl("set", pid, "device_limit=none").stdout
    check("device_limit: 0:32M -> none" in out, "raised: %s" % out)
    for _ in range(200):   # untouched: the raise brings it all home
        if dev0_now()["on_host"] == 0:
            break
        time.sleep(0.01)
    dev0 = dev0_now()
    check(dev0["on_host"] == 0 and dev0["home"] >= 48 << 20, "promoted back: %s" % dev0)
    check(ask("check") == "ok", "data intact after the promotion")
    check("spill: host -> off" in ctl("set", pid, "spill=off").stdout, "spill off again")

    # pause keeps the data on host and releases the device memory; resume brings it back.
    check("paused" in ctl("pause", pid, "weights").stdout, "pause says so")
    check(ask("where") == "-1", "the paused tag lives on the host")
    dev0 = [p for p in json.loads(ctl("list", "--json").stdout) if p["pid"] == pid][0]["devices"][0]
    check(dev0["held"] <= held_before - (24 << 20) and dev0["on_host"] >= 24 << 20,
          "device memory released by pause: held %d -> %d" % (held_before, dev0["held"]))
    check(ask("check") == "ok", "data readable while paused")
    ctl("resume", pid, "weights")
    check(ask("where") == "0", "resumed home")
    check(ask("check") == "ok", "data intact after pause and resume")

    # The whole process, as an unmodified program has no tags: every
    # allocation to host, the device given back, the answer in bytes.
    out = ctl("pause", pid).stdout
    check(re.fullmatch(r"paused 48\.0 MiB \(device 0: 48\.0 MiB to host\) in \d+\.\d\d s, \d+\.\d GB/s; "
                       r"released \d+\.\d MiB to the driver\n", out), "a whole-process pause answers in bytes: %r" % out)
    dev0 = dev0_now()
    check(dev0["held"] == 0 and dev0["on_host"] == 48 << 20, "every device byte released: %s" % dev0)
    check(ask("check") == "ok", "copies read paused memory")
    out = ctl("pause", pid).stdout
    check(out == "nothing to pause: every allocation is paused already\n",
          "a repeated pause says so: %r" % out)
    err = ctl("pause", pid, "nosuchtag", expect=1).stderr
    check(err == "gvmctl: process %d: nothing to pause: no allocation is tagged nosuchtag\n" % pid,
          "a tag nothing carries: %r" % err)
    err = ctl("pause", pid, "--discard", expect=1).stderr
    check("--discard needs a TAG" in err, "discarding the whole process is refused: %r" % err)
    out = ctl("resume", pid).stdout
    check(re.fullmatch(r"resumed 48\.0 MiB \(device 0: 48\.0 MiB back\) in \d+\.\d\d s, \d+\.\d GB/s\n",
                       out), "a whole-process resume answers in bytes: %r" % out)
    check(ask("where") == "0" and ask("check") == "ok" and dev0_now()["on_host"] == 0, "all back, intact")
    out = ctl("resume", pid).stdout
    check(out == "nothing to resume: no allocation is paused\n", "a repeated resume says so: %r" % out)

    out = ctl("pause", pid, "weights", "--unmapped").stdout
    check("to host, unmapped)" in out, "an unmapped pause says so: %s" % out)
    check(ask("where") == "-1", "the tag's copy waits on the host")
    dev0 = [p for p in json.loads(ctl("list", "--json").stdout) if p["pid"] == pid][0]["devices"][0]
    check(dev0["held"] <= held_before - (24 << 20) and dev0["on_host"] >= 24 << 20,
          "device memory released by an unmapped pause: held %d -> %d, on host %d"
          % (held_before, dev0["held"], dev0["on_host"]))
    ctl("resume", pid, "weights")
    check(ask("where") == "0" and ask("check") == "ok", "data intact after an unmapped pause and resume")
    ctl("pause", pid, "weights", "--discard", "--unmapped", expect=1)
    ctl("pause", pid, "weights", "--discard")
    ctl("resume", pid)
    check(ask("check") == "zero", "discarded memory comes back zeroed")

    # migrate by tag, then everything, and back; data intact.
    out = ctl("migrate", pid, "weights", "host").stdout
    check(re.fullmatch(r"moved 24\.0 MiB to host \(device 0: 24\.0 MiB left\) in \d+\.\d\d s, \d+\.\d GB/s; "
                       r"released \d+\.\d MiB to the driver\n", out), "migrate answers in bytes: %r" % out)
    check(ask("where") == "-1", "the tag moved to host")
    ctl("migrate", pid, "--all", 1)
    check(ask("where") == "1", "every allocation moved to device 1")
    ctl("migrate", pid, "--all", 0)
    # (the tagged allocation reads zeroes since the discarding pause above)
    check(ask("where") == "0" and ask("check") == "zero", "back home, data intact")
    err = ctl("migrate", pid, "weights", 7, expect=1).stderr
    check(err.startswith("gvmctl: process"), "an absent device is refused: %s" % err)
    ctl("migrate", pid, "weights", "moon", expect=1)
    ctl("migrate", pid, "weights", expect=2)

    # top, bounded.
    out = ctl("top", "--count", "2", "--interval", "0.2").stdout
    check(out.count(str(pid)) == 2, "top shows the process each round")

    # Refusals: one clear line, non-zero exit.
    err = ctl("stats", 999999999, expect=1).stderr
    check("not a process id" in err or "no process" in err, "unknown pid: %s" % err)
    err = ctl("stats", 4194000, expect=1).stderr
    check(err.startswith("gvmctl: no process"), "absent pid: %s" % err)
    err = ctl("stats", os.getpid(), expect=1).stderr
    check("not running under gvmshim" in err, "a process not under the shim: %s" % err)
    if os.geteuid() == 0 and shutil.which("setpriv"):
        other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
        try:
            time.sleep(0.3)
            err = ctl("stats", other.pid, expect=1).stderr
            check("belongs to another user" in err, "another user's process: %s" % err)
        finally:
            other.kill()
            other.wait()
    ctl("frobnicate", expect=2)
    ctl("pause", expect=2)
    manual = ctl("--help").stdout
    check("SYNOPSIS" in manual and "gvmctl set PID KEY=VALUE..." in manual, "gvmctl --help is a manual")
    live = subprocess.run([gvm_config, "--help-config"], capture_output=True, text=True).stdout.count("    live: ")
    listed = manual.split("live options:", 1)[-1].split("\n    pause")[0].split(",")
    check(live >= 8 and len(listed) == live and any(x.strip() == "device_limit" for x in listed),
          "the manual lists the live options of the table: %s" % listed)

    # A killed process's socket (nobody listens on it) goes at the next
    # list; the target's own and a symlink named like a socket stay.
    sockdir = os.path.join(runtime, "gvmshim")
    stale = os.path.join(sockdir, "00000000000000d1.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    dead.bind(stale)
    dead.close()
    link = os.path.join(sockdir, "00000000000000d2.sock")
    os.symlink(stale, link)
    own = [n for n in os.listdir(sockdir) if n.endswith(".sock") and n not in (os.path.basename(stale),
                                                                                os.path.basename(link))]
    out = ctl("list").stdout
    check(str(pid) in out, "list still shows the process: %s" % out)
    check(not os.path.lexists(stale), "list removed the dead process's socket")
    check(os.path.lexists(link), "list left the symlink alone")
    check(all(os.path.lexists(os.path.join(sockdir, n)) for n in own), "list left the live sockets: %s" % own)
    os.unlink(link)
finally:
    proc.stdin.close()
    proc.wait(timeout=60)
    shutil.rmtree(runtime, ignore_errors=True)

check(proc.returncode == 0, "the target exited cleanly (%s)" % proc.returncode)
print("%d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
sys.exit(1 if failures else 0)
