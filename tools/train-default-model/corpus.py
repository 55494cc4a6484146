#!/usr/bin/python3
"""Collect the training corpus from source code that Debian packages install.

Sources (all permissively licensed, listed with packages in models/README.md):
  * CPython 3.11's standard library and test suite (.py), PSF-2.0:
      libpython3.11-stdlib, libpython3.11-testsuite -> /usr/lib/python3.11
  * A slice of Boost 1.81's headers (.hpp), BSL-1.0:
      libboost1.81-dev -> /usr/include/boost/{json,beast,algorithm,container,...}

The held-out slice is fixed: a file is held out when the first byte of the
SHA-1 of its path (relative to its root) is < 5, i.e. about 2% of files, chosen
by name so that it never depends on what else is installed. Held-out files
never enter the tokenizer's or the model's training data.

Writes OUT/train_files.txt, OUT/heldout_files.txt, OUT/train.txt (files joined
by NUL, for the trainer), OUT/heldout.txt (held-out Python joined by blank
lines: the text `moelsp perplexity` and the trainer's evaluation both read) and
OUT/corpus.json (sizes and counts).
"""
import argparse
import hashlib
import json
import os
import sys

PY_ROOT = "/usr/lib/python3.11"
BOOST_ROOT = "/usr/include/boost"
BOOST_DIRS = ["json", "beast", "algorithm", "container", "optional", "variant2", "system", "core", "url", "describe"]
MAX_FILE = 200_000  # bytes: larger files are generated tables and test data, not code
# Test data that is not code people write (encoded samples, generated tables, bad syntax on purpose).
SKIP_PARTS = ("/test/encoded_modules/", "/test/badsyntax", "/test/bad_coding", "/lib2to3/tests/data/",
              "/test/tokenizedata/", "/test/test_lib2to3/data/", "/site-packages/", "/dist-packages/",
              "/__pycache__/", "/test/cjkencodings/", "/test/decimaltestdata/")


def held_out(rel):
    return hashlib.sha1(rel.encode()).digest()[0] < 5


def collect(root, exts, subdirs=None):
    out = []
    tops = [os.path.join(root, d) for d in subdirs] if subdirs else [root]
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(exts):
                    continue
                path = os.path.join(dirpath, name)
                if any(p in path + "/" for p in SKIP_PARTS) or os.path.islink(path):
                    continue
                size = os.path.getsize(path)
                if size == 0 or size > MAX_FILE:
                    continue
                try:
                    text = open(path, "rb").read().decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if "\0" in text or "\r" in text:
                    continue
                out.append((os.path.relpath(path, root), path, text))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--heldout-bytes", type=int, default=300_000, help="cap on the held-out evaluation text")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    py = collect(PY_ROOT, (".py",))
    cpp = collect(BOOST_ROOT, (".hpp", ".ipp"), BOOST_DIRS) if os.path.isdir(BOOST_ROOT) else []
    if not py:
        sys.exit(f"no Python sources under {PY_ROOT}: apt install libpython3.11-stdlib libpython3.11-testsuite")
    train, held = [], []
    for rel, path, text in [(("python/" + r), p, t) for r, p, t in py] + [(("boost/" + r), p, t) for r, p, t in cpp]:
        (held if held_out(rel) else train).append((rel, path, text))
    with open(os.path.join(args.out, "train_files.txt"), "w") as f:
        f.writelines(p + "\n" for _, p, _ in train)
    with open(os.path.join(args.out, "heldout_files.txt"), "w") as f:
        f.writelines(p + "\n" for _, p, _ in held)
    with open(os.path.join(args.out, "train.txt"), "w") as f:
        f.write("\0".join(t for _, _, t in train))
    # The evaluation text: held-out Python files in path order up to the cap.
    parts, size = [], 0
    for rel, _, text in held:
        if not rel.startswith("python/") or size + len(text) > args.heldout_bytes:
            continue
        parts.append(text)
        size += len(text)
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write("\n\n".join(parts))
    stats = {
        "train_files": len(train), "train_bytes": sum(len(t.encode()) for _, _, t in train),
        "train_python_bytes": sum(len(t.encode()) for r, _, t in train if r.startswith("python/")),
        "train_boost_bytes": sum(len(t.encode()) for r, _, t in train if r.startswith("boost/")),
        "heldout_files": len(held), "heldout_eval_files": len(parts),
        "heldout_eval_bytes": len("\n\n".join(parts).encode()),
    }
    json.dump(stats, open(os.path.join(args.out, "corpus.json"), "w"), indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
