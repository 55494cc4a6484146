"""Small file utilities: the sample the moelsp demo opens."""
import os


def read_lines(path, strip=True):
    """Return the lines of a text file, without trailing newlines."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if strip:
        lines = [line.strip() for line in lines]
    return lines


def find_files(root, suffix):
    """Yield the paths under root whose names end with suffix."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            if name.endswith(suffix):
                yield os.path.join(dirpath, name)


def count_words(text):
    """Return a dict mapping each word of text to the number of times it occurs."""
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
