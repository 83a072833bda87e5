#!/usr/bin/env python3
"""What may include what: fails (exit 1, one line per offending #include) when

  - a file under router/ includes a transport header (transport/, transport/include/) or the worker
    shim's (worker-shim/): the router never links the transport;
  - a file under transport/ includes an h2o, libcurl or config/ header: the transport is a library of
    its own, below the router and the configuration.

usage: check_includes.py ROOT  (ROOT: the source tree, or a fixture tree with the same folders)."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def headers(root, *dirs):
    names = set()
    for d in dirs:
        p = os.path.join(root, d)
        if os.path.isdir(p):
            names.update(f for f in os.listdir(p) if f.endswith('.h'))
    return names


def sources(root, top):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for f in sorted(files):
            if f.endswith(('.c', '.h')):
                yield os.path.join(dirpath, f)


def includes(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1), m.group(2)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    # Our own header names only; the toolkit's <cuda.h> is not ours (ours is "gpu_cuda.h").
    transport = headers(root, 'transport', 'transport/include', 'worker-shim')
    config = headers(root, 'config')
    bad = []
    for path in sources(root, 'router'):
        for n, kind, name in includes(path):
            if os.path.basename(name) in transport and (kind == '"' or name.startswith(('transport', 'pdshim'))):
                bad.append('%s:%d: router/ must not include the transport or shim header %s' % (path, n, name))
    for path in sources(root, 'transport'):
        for n, kind, name in includes(path):
            base = os.path.basename(name)
            if name.startswith(('h2o', 'curl/')) or base in ('h2o.h', 'curl.h'):
                bad.append('%s:%d: transport/ must not include %s (h2o and libcurl belong to the router)' %
                           (path, n, name))
            elif kind == '"' and base in config and base not in transport:
                bad.append('%s:%d: transport/ must not include the config header %s' % (path, n, name))
    for b in bad:
        print(b)
    if bad:
        return 1
    print('check_includes: %s: router/ and transport/ include only what they may' % root)
    return 0


if __name__ == '__main__':
    sys.exit(main())
