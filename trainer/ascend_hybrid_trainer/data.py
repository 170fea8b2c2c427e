"""Token batches, identical for a given (seed, step, global batch) at any data-parallel degree.

Every source yields the *global* batch of a step; a data-parallel rank keeps its contiguous slice of it. So the
global-batch loss (the mean over DP ranks of their slice losses) is the same number whatever the DP degree, and a
resumed run sees exactly the batches the interrupted one would have seen (the batch depends on the step only).

Sources: synthetic (default), a numpy file (`.npy`: 2-D [samples, ≥ seq+1] or a 1-D token stream cut into
windows of seq+1), or a MindRecord file with an `input_ids` column.
"""

from __future__ import annotations

import os
from typing import Any, cast

import numpy as np

from .config import DataError

MINDRECORD_COLUMN = "input_ids"


class SyntheticTokens:
    """A small synthetic language: tokens drawn from a Zipf distribution (like words in text), and with
    probability FOLLOW_PROBABILITY a token is the fixed successor of the previous one instead.

    Learnable on purpose: the unigram skew is learnt in a few steps and the successor rule later, so a falling
    loss shows real training, whereas uniform random tokens sit at log(vocab) whatever the model does.
    """

    ZIPF_EXPONENT = 1.2
    FOLLOW_PROBABILITY = 0.3

    def __init__(self, vocab: int, seq_length: int, seed: int):
        self.vocab, self.seq_length, self.seed = vocab, seq_length, seed
        weights = 1.0 / np.arange(1, vocab + 1) ** self.ZIPF_EXPONENT
        self.cumulative = np.cumsum(weights / weights.sum())

    def successor(self, tokens: np.ndarray) -> np.ndarray:
        return (tokens * 7 + 1) % self.vocab

    def global_batch(self, step: int, batch_size: int) -> np.ndarray:
        rng = np.random.RandomState([self.seed, step])  # legacy generator: stable across numpy releases
        length = self.seq_length + 1
        drawn = np.searchsorted(self.cumulative, rng.random_sample((batch_size, length)), side="right")
        drawn = np.minimum(drawn, self.vocab - 1)
        follows = rng.random_sample((batch_size, length)) < self.FOLLOW_PROBABILITY
        tokens = np.empty((batch_size, length), dtype=np.int64)
        tokens[:, 0] = drawn[:, 0]
        for position in range(1, length):
            tokens[:, position] = np.where(follows[:, position], self.successor(tokens[:, position - 1]),
                                           drawn[:, position])
        return tokens.astype(np.int32)


class NumpyTokens:
    """Samples read from a .npy file (memory-mapped, so a large corpus is not loaded whole)."""

    def __init__(self, path: str, seq_length: int, vocab: int):
        self.path, self.seq_length, self.vocab = path, seq_length, vocab
        try:
            array = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as error:  # not a numpy file, truncated, or an object array
            raise DataError(f"AHJ_DATASET_PATH={path}: not a readable .npy array ({error})") from None
        window = seq_length + 1
        if array.ndim == 1:
            usable = (array.shape[0] // window) * window
            array = array[:usable].reshape(-1, window)
        elif array.ndim != 2:
            raise DataError(f"AHJ_DATASET_PATH={path}: expected a 1-D token stream or 2-D [samples, tokens] "
                              f"array, got {array.ndim} dimensions")
        if array.shape[0] == 0 or array.shape[1] < window:
            raise DataError(f"AHJ_DATASET_PATH={path}: samples need at least seqLength+1={window} tokens, "
                              f"array has shape {array.shape}")
        self.samples = array

    def global_batch(self, step: int, batch_size: int) -> np.ndarray:
        count = self.samples.shape[0]
        indices = (step * batch_size + np.arange(batch_size)) % count
        return check_token_range(np.asarray(self.samples[indices, :self.seq_length + 1], dtype=np.int32),
                                 self.vocab, self.path)


class MindRecordTokens:
    """Samples read in order from a MindRecord file; wraps around at the end like NumpyTokens."""

    def __init__(self, path: str, seq_length: int, vocab: int):
        import mindspore.dataset as ds  # only this source needs MindSpore's dataset engine

        self.path, self.seq_length, self.vocab = path, seq_length, vocab
        self._dataset_module = ds
        self.count = ds.MindDataset(path, columns_list=[MINDRECORD_COLUMN], shuffle=False).get_dataset_size()
        if self.count == 0:
            raise DataError(f"AHJ_DATASET_PATH={path}: the MindRecord file holds no samples")
        # MindSpore's tuple iterator (untyped) and the index of the sample it yields next: _open_at sets both
        self._iterator: Any = None
        self._next_index: int | None = None

    def _open_at(self, index: int):
        dataset = self._dataset_module.MindDataset(self.path, columns_list=[MINDRECORD_COLUMN], shuffle=False)
        dataset = dataset.skip(index % self.count) if index % self.count else dataset
        self._iterator = dataset.create_tuple_iterator(output_numpy=True, num_epochs=1)
        self._next_index = index

    def _read_one(self) -> np.ndarray:
        try:
            (row,) = next(self._iterator)
        except StopIteration:
            self._open_at(0)
            (row,) = next(self._iterator)
        self._next_index = cast(int, self._next_index) + 1  # _open_at ran before any read
        row = np.asarray(row).reshape(-1)
        if row.shape[0] < self.seq_length + 1:
            raise DataError(f"AHJ_DATASET_PATH={self.path}: sample with {row.shape[0]} tokens, seqLength+1="
                              f"{self.seq_length + 1} needed")
        return row[:self.seq_length + 1]

    def global_batch(self, step: int, batch_size: int) -> np.ndarray:
        first = (step * batch_size) % self.count
        if self._iterator is None or cast(int, self._next_index) % self.count != first:
            self._open_at(first)  # first call, or a resume: jump to the step's first sample
        batch = np.stack([self._read_one() for _ in range(batch_size)]).astype(np.int32)
        return check_token_range(batch, self.vocab, self.path)


def open_token_source(path: str | None, vocab: int, seq_length: int, seed: int):
    if not path:
        return SyntheticTokens(vocab, seq_length, seed)
    if not os.path.exists(path):
        raise DataError(f"AHJ_DATASET_PATH={path}: no such file")
    if path.endswith(".npy"):
        return NumpyTokens(path, seq_length, vocab)
    if ".mindrecord" in os.path.basename(path):
        return MindRecordTokens(path, seq_length, vocab)
    raise DataError(f"AHJ_DATASET_PATH={path}: expected a .npy file or a .mindrecord file")


def check_token_range(batch: np.ndarray, vocab: int, path: str) -> np.ndarray:
    """An id outside the vocabulary would make the embedding lookup return garbage without an error."""
    if batch.size and (batch.min() < 0 or batch.max() >= vocab):
        raise DataError(f"AHJ_DATASET_PATH={path}: token ids must lie in [0, model.vocab={vocab}), found "
                          f"{int(batch.min())}..{int(batch.max())}")
    return batch


def rank_slice(global_batch: np.ndarray, data_rank: int, data_degree: int) -> np.ndarray:
    """The contiguous rows of the global batch that one data-parallel rank trains on."""
    rows = global_batch.shape[0] // data_degree
    return global_batch[data_rank * rows:(data_rank + 1) * rows]


def inputs_and_labels(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Next-token prediction: the label of position i is the token at i+1."""
    return tokens[:, :-1], tokens[:, 1:]
