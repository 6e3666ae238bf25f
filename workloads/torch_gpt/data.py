"""Corpus and batching for the torch_gpt workload (FROZEN: not in the editable scope).

Corpus
------
The top-level ``*.py`` files of the Python 3.11 standard library (``/usr/lib/python3.11``, shipped
by Debian 12's ``libpython3.11-stdlib``), sorted by file name in byte order (``LC_ALL=C``),
concatenated and cut at ``CORPUS_BYTES`` bytes.  Tokens are bytes (vocabulary 256).  Nothing is
downloaded.  The SHA-256 of the corpus bytes is printed in the final metrics line so that a machine
with a different stdlib (another Debian point release) is visible; on the reference machine
(libpython3.11-stdlib 3.11.2-6+deb12u6) it is recorded in README.md.

Batching
--------
The corpus is cut into non-overlapping windows of ``seq_len + 1`` tokens (stride ``seq_len + 1``).
For epoch ``e`` the windows are permuted with ``torch.Generator().manual_seed(seed * 1_000_003 + e)``.
Global step ``s`` takes the next ``global_batch`` windows of that stream (crossing epochs if needed).
That is the global batch; it depends only on (corpus, seq_len, global_batch, seed, step), never on
world size or micro-batch.  Rank ``r`` of ``W`` takes the contiguous shard of rows
``[r*B/W, (r+1)*B/W)``; its micro-batch ``m`` is rows ``[m*mb, (m+1)*mb)`` of that shard.  Inputs are
window[:-1], targets window[1:].
"""
import glob
import hashlib
import os

import torch

STDLIB_DIR = "/usr/lib/python3.11"
CORPUS_BYTES = 1 << 20  # 1 MiB


def load_corpus(directory=STDLIB_DIR, cap=CORPUS_BYTES):
    """Returns (uint8 tensor of the corpus, sha256 hex of its bytes, number of files read)."""
    paths = sorted(glob.glob(os.path.join(directory, "*.py")), key=lambda p: os.path.basename(p).encode())
    if not paths:
        raise FileNotFoundError("no *.py files under %s: the corpus needs the Python 3.11 stdlib" % directory)
    chunks, total, used = [], 0, 0
    for path in paths:
        if total >= cap:
            break
        with open(path, "rb") as f:
            b = f.read()
        chunks.append(b)
        total += len(b)
        used += 1
    data = b"".join(chunks)[:cap]
    sha = hashlib.sha256(data).hexdigest()
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()
    return tokens, sha, used


class GlobalBatches:
    """Deterministic global batches of windows of ``seq_len + 1`` byte tokens."""

    def __init__(self, tokens, seq_len, global_batch, seed):
        self.seq_len = seq_len
        self.global_batch = global_batch
        self.seed = seed
        n_windows = tokens.numel() // (seq_len + 1)
        if n_windows < 1:
            raise ValueError("corpus too small for seq_len %d" % seq_len)
        self.windows = tokens[: n_windows * (seq_len + 1)].view(n_windows, seq_len + 1).long()
        self.n_windows = n_windows
        self._perm_cache = {}

    def _perm(self, epoch):
        p = self._perm_cache.get(epoch)
        if p is None:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            p = torch.randperm(self.n_windows, generator=g)
            self._perm_cache = {epoch: p}
        return p

    def rows(self, step, first, count):
        """Window indices of rows [first, first+count) of global batch ``step``."""
        out = []
        for i in range(first, first + count):
            k = step * self.global_batch + i
            epoch, j = divmod(k, self.n_windows)
            out.append(int(self._perm(epoch)[j]))
        return out

    def micro_batch(self, step, rank, world_size, micro_batch, index):
        """(inputs, targets), each [micro_batch, seq_len] int64, of micro-batch ``index`` of ``rank``."""
        shard = self.global_batch // world_size
        first = rank * shard + index * micro_batch
        w = self.windows[self.rows(step, first, micro_batch)]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()
