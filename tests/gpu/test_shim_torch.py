#!/usr/bin/env python3
"""The worker shim with PyTorch GPU tensors, end to end across processes (exits 77 without torch or a
GPU): a prefill process offers a KV pool on cuda:0 in 64 scattered pages; decode processes fetch it
through pdshim.py into a pool on the last GPU, with (address, length) segments in another order:
  1. the default caching allocator (cudaMalloc memory): backend cuda_ipc;
  2. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (VMM memory, cuMemCreate): backend cuda_ipc when
     the allocation is exportable as a file descriptor, tcp staging otherwise (both print which);
  3. backend forced to tcp: GPU -> GPU through the pinned staging pool.
Every byte is compared on the device. Usage: test_shim_torch.py [DIR holding pdshim.py]"""
import json
import os
import subprocess
import sys

HERE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else os.getcwd())
PAGES, PAGE = 64, 1 << 20  # a 64 MiB pool in 1 MiB pages
ROOMS = {"default": 71, "expandable": 72, "tcp": 73}


def order(n):
    """Page i of the room lives at pool page order[i] (a fixed shuffle)."""
    return [(i * 37 + 11) % n for i in range(n)]


def pool(torch, dev):
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, 256, (PAGES * PAGE,), dtype=torch.uint8, generator=g).to(dev)


def prefill():
    import torch
    sys.path.insert(0, HERE)
    import pdshim
    torch.cuda.set_device(0)
    kv = pool(torch, "cuda:0")
    torch.cuda.synchronize()
    with pdshim.Shim(listen_host="127.0.0.1", default_timeout_ms=60000) as shim:
        shim.register(kv.data_ptr(), kv.numel())
        print(json.dumps({"port": shim.port}), flush=True)
        base = kv.data_ptr()
        futs = {name: shim.offer(room, [(base + p * PAGE, PAGE) for p in order(PAGES)])
                for name, room in ROOMS.items()}
        out = {}
        for name, f in futs.items():
            out[name] = {"bytes": f.result(timeout=120), "backend": f.backend}
        print(json.dumps(out), flush=True)


def decode(mode, port):
    import torch
    sys.path.insert(0, HERE)
    import pdshim
    dev = torch.cuda.device_count() - 1
    torch.cuda.set_device(dev)
    dst = torch.zeros(PAGES * PAGE, dtype=torch.uint8, device="cuda:%d" % dev)
    torch.cuda.synchronize()
    opts = {"backend": "tcp"} if mode == "tcp" else {}
    with pdshim.Shim(default_timeout_ms=60000, **opts) as shim:
        shim.register(dst.data_ptr(), dst.numel(), "cuda")
        base = dst.data_ptr()
        # The room's page i goes to destination page (PAGES - 1 - order[i]): another scatter.
        segs = [(base + (PAGES - 1 - p) * PAGE, PAGE) for p in order(PAGES)]
        f = shim.fetch("127.0.0.1", port, ROOMS[mode], segs)
        n = f.result(timeout=120)
        want = pool(torch, "cuda:%d" % dev).view(PAGES, PAGE).flip(0).reshape(-1)
        same = bool(torch.equal(dst, want))
        print(json.dumps({"mode": mode, "device": dev, "bytes": n, "backend": f.backend, "usec": f.usec,
                          "same": same}), flush=True)
        return 0 if same and n == PAGES * PAGE else 1


def main():
    if len(sys.argv) > 2 and sys.argv[2] == "--prefill":
        return prefill()
    if len(sys.argv) > 2 and sys.argv[2] == "--decode":
        return decode(sys.argv[3], int(sys.argv[4]))
    try:
        import torch
    except ImportError:
        print("skip: no torch")
        return 77
    if not torch.cuda.is_available():
        print("skip: no CUDA device")
        return 77
    me = [sys.executable, os.path.abspath(__file__), HERE]
    pre = subprocess.Popen(me + ["--prefill"], stdout=subprocess.PIPE, text=True)
    port = json.loads(pre.stdout.readline())["port"]
    results = {}
    for mode in ROOMS:
        env = dict(os.environ)
        if mode == "expandable":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        out = subprocess.run(me + ["--decode", mode, str(port)], env=env, capture_output=True, text=True,
                             timeout=300)
        sys.stderr.write(out.stderr)
        line = [l for l in out.stdout.splitlines() if l.startswith("{")]
        results[mode] = json.loads(line[-1]) if line else {"mode": mode, "rc": out.returncode}
        print(json.dumps(results[mode]))
    pre_out = json.loads(pre.stdout.readline() or "{}")
    pre.wait(timeout=60)
    print("prefill:", json.dumps(pre_out))
    ok = all(r.get("same") for r in results.values()) and pre.returncode == 0
    ok = ok and results["default"].get("backend") == "cuda_ipc" and results["tcp"].get("backend") == "tcp"
    ok = ok and results["expandable"].get("backend") in ("cuda_ipc", "tcp")
    print("all ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
