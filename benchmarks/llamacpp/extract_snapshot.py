# Extract a commit tree from a bare git dir, skipping blobs missing from the snapshot.
import subprocess, sys, os
gd, commit, out = sys.argv[1:4]
ls = subprocess.run(['git', '--git-dir', gd, 'ls-tree', '-r', '-z', commit], capture_output=True, check=True).stdout
entries = []
for rec in ls.split(b'\0'):
    if not rec: continue
    meta, path = rec.split(b'\t', 1)
    mode, typ, sha = meta.split()
    if typ != b'blob': continue
    entries.append((mode, sha, path.decode()))
p = subprocess.Popen(['git', '--git-dir', gd, 'cat-file', '--batch'], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
missing = []
for mode, sha, path in entries:
    p.stdin.write(sha + b'\n'); p.stdin.flush()
    hdr = p.stdout.readline().split()
    if hdr[1] == b'missing':
        missing.append(path); continue
    n = int(hdr[2]); data = p.stdout.read(n); p.stdout.read(1)
    dst = os.path.join(out, path); os.makedirs(os.path.dirname(dst), exist_ok=True)
    if mode == b'120000':
        os.symlink(data.decode(), dst)
    else:
        with open(dst, 'wb') as f: f.write(data)
        if mode == b'100755': os.chmod(dst, 0o755)
p.stdin.close(); p.wait()
print(len(entries), 'files;', len(missing), 'missing:', *missing, sep='\n  ')
