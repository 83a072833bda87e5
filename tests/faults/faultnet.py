"""Network namespaces, veth links and traffic control for the fault suite (python3 standard library and
iproute2 only).

    net = faultnet.Net(prefills=2, decodes=1)   # namespaces p0, p1, d0; raises Skip when not possible
    net.up()                                    # links, addresses, routes
    p0 = net.prefill(0)                         # .ns, .addr (the router reaches it there)
    net.run(p0, ["pdsim", ...])                 # argv inside the namespace
    net.kv_link(0, 0).down()                    # the prefill 0 <-> decode 0 link: partition
    net.teardown()                              # also done at exit and after a failed test

Topology. The router and the test stay in the root namespace. Every worker gets a namespace of its own,
joined to the root namespace by a veth pair (the router's path to it: HTTP and health checks), and every
prefill is joined to every decode by one more veth pair (the KV path). A decode reaches a prefill's
address (the host of its URL, which the router hands out as `bootstrap_host`) through a /32 route over
their own link, so that the KV bytes never cross the root namespace: a fault on a KV link leaves the
router's paths alone, and a fault on a worker's root link leaves its KV alone.

Addresses: 10.A.B.x with A, B taken from the process id, so that tests running in parallel never meet;
namespace and interface names carry the process id too. Names of processes that are gone (a test killed
before its cleanup ran) are swept at the next start.

Faults, each a real kernel mechanism (the test prints which it used):
- loss: netem `loss` where the kernel has sch_netem, else netem is absent and the link gets a token
  bucket (tbf) whose queue holds only a few packets: TCP's bursts overflow it and packets are really
  dropped (the qdisc's `dropped` counter says how many) and retransmitted;
- latency: netem `delay` where present, else the caller puts delayproxy.py in the path;
- rate: tbf;
- partition: `ip link set down` on one end of the link (the other end loses its carrier, packets in
  flight and new ones are lost, no RST is sent), or a route deleted (a worker that can no longer answer
  the router: the router's SYNs arrive, the SYN-ACKs have no route, so the router sees a connect timeout).
"""

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys

IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"
PREFIX = "pdf"  # every namespace of this suite: pdf<pid>-<name>


class Skip(Exception):
    """No means exists on this machine for what the test needs (printed, then the test exits 77)."""


def sh(argv, check=True):
    """Runs argv; returns (rc, stdout+stderr). Raises RuntimeError on a failure when check."""
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode, r.stdout.strip()))
    return r.returncode, r.stdout


def require():
    """Raises Skip when namespaces cannot be made here (not root, no iproute2)."""
    if os.geteuid() != 0:
        raise Skip("network fault tests need root (network namespaces, veth, tc)")
    if not os.access(IP, os.X_OK) or not os.access(TC, os.X_OK):
        raise Skip("network fault tests need iproute2 (ip, tc)")
    rc, out = sh([IP, "netns", "add", "%s%d-probe" % (PREFIX, os.getpid())], check=False)
    if rc != 0:
        raise Skip("cannot create a network namespace: %s" % out.strip())
    sh([IP, "netns", "del", "%s%d-probe" % (PREFIX, os.getpid())], check=False)


def kill_inside(ns):
    """SIGKILLs the processes left in namespace ns (the workers a killed test run started there)."""
    rc, out = sh([IP, "netns", "pids", ns], check=False)
    for pid in out.split() if rc == 0 else []:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ValueError, OSError):
            pass


def sweep_stale():
    """Deletes the namespaces of earlier test processes that no longer run, and what still runs there."""
    rc, out = sh([IP, "netns", "list"], check=False)
    for line in out.splitlines():
        m = re.match(r"^(%s(\d+)-\S+)" % PREFIX, line)
        if not m:
            continue
        pid = int(m.group(2))
        try:
            os.kill(pid, 0)
            continue  # still running (another test)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        kill_inside(m.group(1))
        sh([IP, "netns", "del", m.group(1)], check=False)


_probe_cache = {}


def has_qdisc(kind, args):
    """Whether the kernel has a qdisc (e.g. netem): tries it on a throwaway veth pair."""
    if kind in _probe_cache:
        return _probe_cache[kind]
    a, b = "%sq%da" % (PREFIX, os.getpid() % 100000), "%sq%db" % (PREFIX, os.getpid() % 100000)
    ok = False
    if sh([IP, "link", "add", a, "type", "veth", "peer", "name", b], check=False)[0] == 0:
        ok = sh([TC, "qdisc", "add", "dev", a, "root", kind] + list(args), check=False)[0] == 0
        sh([IP, "link", "del", a], check=False)
    _probe_cache[kind] = ok
    return ok


def has_netem():
    return has_qdisc("netem", ["delay", "1ms"])


class Link:
    """One veth pair: end a in namespace ns_a (None: the root namespace), end b in ns_b."""

    def __init__(self, net, name_a, ns_a, name_b, ns_b):
        self.net, self.a, self.ns_a, self.b, self.ns_b = net, name_a, ns_a, name_b, ns_b

    def _ip(self, ns, *args):
        return sh(([IP, "-n", ns] if ns else [IP]) + list(args))

    def _tc(self, ns, *args, check=True):
        return sh(([IP, "netns", "exec", ns, TC] if ns else [TC]) + list(args), check=check)

    def down(self):
        """Partition: end a goes down (end b loses its carrier); nothing crosses, nothing is reset."""
        self._ip(self.ns_a, "link", "set", self.a, "down")

    def up(self):
        self._ip(self.ns_a, "link", "set", self.a, "up")

    def qdisc(self, *spec):
        """Replaces the root qdisc of both ends with spec (e.g. "tbf", "rate", "20mbit", ...)."""
        for ns, dev in ((self.ns_a, self.a), (self.ns_b, self.b)):
            self._tc(ns, "qdisc", "replace", "dev", dev, "root", *spec)

    def clear(self):
        for ns, dev in ((self.ns_a, self.a), (self.ns_b, self.b)):
            self._tc(ns, "qdisc", "del", "dev", dev, "root", check=False)

    def counts(self):
        """(packets sent, packets dropped) by the root qdiscs of both ends so far."""
        sent = dropped = 0
        for ns, dev in ((self.ns_a, self.a), (self.ns_b, self.b)):
            _, out = self._tc(ns, "-s", "qdisc", "show", "dev", dev, check=False)
            for m in re.finditer(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+)", out):
                sent += int(m.group(1))
                dropped += int(m.group(2))
        return sent, dropped

    def loss(self, percent):
        """Packet loss on both directions. Returns a description of the mechanism used."""
        if has_netem():
            self.qdisc("netem", "loss", "%g%%" % percent)
            return "netem loss %g%%" % percent
        # No sch_netem (and no act_gact for a random drop): a token bucket whose queue holds about ten
        # full-size packets. A TCP sender's window outgrows it, so packets are really dropped (the
        # sender's congestion control then backs off and grows again: loss keeps coming). Segmentation
        # offload is capped at one MTU first: a 64 KiB GSO packet would never fit the queue.
        for ns, dev in ((self.ns_a, self.a), (self.ns_b, self.b)):
            self._ip(ns, "link", "set", dev, "gso_max_size", "1500")
        self.qdisc("tbf", "rate", "200mbit", "burst", "15000", "limit", "15000")
        return "tbf tail drop (no sch_netem, no act_gact): rate 200mbit, a queue of 15000 bytes"

    def rate(self, spec):
        self.qdisc("tbf", "rate", spec, "burst", "32kbit", "latency", "400ms")
        return "tbf rate %s" % spec


class Worker:
    """A worker's namespace: .ns, .addr (its address on its root link, the host of its URL)."""

    def __init__(self, role, i, ns, addr, root_link):
        self.role, self.i, self.ns, self.addr, self.root_link = role, i, ns, addr, root_link

    def unroute_router(self, net):
        """This worker can no longer answer the router: its route back to the root namespace is deleted.
        The router's packets still arrive (its route is intact), the answers have no way back."""
        sh([IP, "-n", self.ns, "route", "del", net.root_subnet(self)])

    def reroute_router(self, net):
        sh([IP, "-n", self.ns, "route", "add", net.root_subnet(self), "dev", self.root_link.b])


class Net:
    """The namespaces of one test process (see the module's docstring)."""

    def __init__(self, prefills=1, decodes=1):
        require()
        sweep_stale()
        pid = os.getpid()
        self.tag = "%s%d" % (PREFIX, pid)
        self.short = "%d" % (pid % 100000)  # interface names are at most 15 characters
        # Eight /24 blocks per process, one per link: 10.A.B.0/24 with A in 64..127 and B a multiple of 8,
        # both from the pid (two live test processes share them only when their pids agree modulo 2048).
        if prefills + decodes + prefills * decodes > 8:
            raise ValueError("at most 8 links per test process")
        idx = (pid % 2048) * 8
        self.a, self.base = 64 + idx // 256, idx % 256
        self.np, self.nd = prefills, decodes
        self.workers = {}
        self.links = []
        self.kv = {}
        self._down = False
        atexit.register(self.teardown)
        for s in (signal.SIGTERM, signal.SIGINT):
            prev = signal.getsignal(s)

            def handler(signum, frame, prev=prev):
                self.teardown()
                if callable(prev):
                    prev(signum, frame)
                sys.exit(128 + signum)

            signal.signal(s, handler)

    def _block(self, n):
        """The /24 of link number n: 10.A.(base + n).0."""
        return "10.%d.%d" % (self.a, self.base + n)

    def root_subnet(self, w):
        return "%s.0/24" % self._block(w.link_no)

    def prefill(self, i):
        return self.workers[("p", i)]

    def decode(self, i):
        return self.workers[("d", i)]

    def kv_link(self, p, d):
        return self.kv[(p, d)]

    def up(self):
        n = 0
        for role, count in (("p", self.np), ("d", self.nd)):
            for i in range(count):
                ns = "%s-%s%d" % (self.tag, role, i)
                sh([IP, "netns", "add", ns])
                sh([IP, "-n", ns, "link", "set", "lo", "up"])
                ra, rb = "f%s%s%dr" % (self.short, role, i), "f%s%s%dw" % (self.short, role, i)
                sh([IP, "link", "add", ra, "type", "veth", "peer", "name", rb, "netns", ns])
                blk = self._block(n)
                sh([IP, "addr", "add", "%s.1/24" % blk, "dev", ra])
                sh([IP, "link", "set", ra, "up"])
                sh([IP, "-n", ns, "addr", "add", "%s.2/24" % blk, "dev", rb])
                sh([IP, "-n", ns, "link", "set", rb, "up"])
                link = Link(self, ra, None, rb, ns)
                self.links.append(link)
                w = Worker(role, i, ns, "%s.2" % blk, link)
                w.link_no = n
                self.workers[(role, i)] = w
                n += 1
        for p in range(self.np):
            for d in range(self.nd):
                pw, dw = self.prefill(p), self.decode(d)
                a, b = "f%sk%d%da" % (self.short, p, d), "f%sk%d%db" % (self.short, p, d)
                sh([IP, "link", "add", a, "netns", pw.ns, "type", "veth", "peer", "name", b, "netns", dw.ns])
                blk = self._block(n)
                n += 1
                sh([IP, "-n", pw.ns, "addr", "add", "%s.1/24" % blk, "dev", a])
                sh([IP, "-n", dw.ns, "addr", "add", "%s.2/24" % blk, "dev", b])
                sh([IP, "-n", pw.ns, "link", "set", a, "up"])
                sh([IP, "-n", dw.ns, "link", "set", b, "up"])
                # The decode reaches the prefill's URL address over this link, never through the root.
                sh([IP, "-n", dw.ns, "route", "add", "%s/32" % pw.addr, "dev", b, "src", "%s.2" % blk])
                link = Link(self, a, pw.ns, b, dw.ns)
                self.links.append(link)
                self.kv[(p, d)] = link
        return self

    def cmd(self, w, argv):
        """argv run inside w's namespace (ip netns exec execs it: the pid is the program's own)."""
        return [IP, "netns", "exec", w.ns] + list(argv)

    def teardown(self):
        if self._down:
            return
        self._down = True
        # The caller stops the processes it started in the namespaces first (pdtest.stop_all, which
        # checks their exit); any left are killed here. Deleting a namespace deletes the veth ends inside
        # it and with them their peers.
        for w in self.workers.values():
            kill_inside(w.ns)
            sh([IP, "netns", "del", w.ns], check=False)
        for l in self.links:
            if l.ns_a is None:
                sh([IP, "link", "del", l.a], check=False)
