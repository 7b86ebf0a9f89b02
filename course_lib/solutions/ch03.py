"""Chapter 03 reference solutions: transforms for ``dataset.map``."""
import numpy as np


def shift_for_lm(row):
    """A packed row of block_size + 1 tokens -> (input_ids, labels): labels are the inputs
    moved one position left (the next token at every position)."""
    row = np.asarray(row, np.int32)
    return row[:-1], row[1:]


def truncate_pad(ids, max_len=16, pad_id=0):
    """Keep the first max_len ids, pad on the right with pad_id; also return the
    key_padding_mask (True = padding, the course's convention)."""
    ids = np.asarray(ids, np.int32)[:max_len]
    n = len(ids)
    padded = np.full(max_len, pad_id, np.int32)
    padded[:n] = ids
    mask = np.arange(max_len) >= n
    return padded, mask


# ---------------------------------------------------------------- realistic wrong solutions
def wrong_shift_none(row):
    row = np.asarray(row, np.int32)
    return row[:-1], row[:-1]


def wrong_shift_reversed(row):
    row = np.asarray(row, np.int32)
    return row[1:], row[:-1]


def wrong_shift_full_input(row):
    row = np.asarray(row, np.int32)
    return row, row[1:]


def wrong_pad_keeps_end(ids, max_len=16, pad_id=0):
    ids = np.asarray(ids, np.int32)[-max_len:]
    padded = np.full(max_len, pad_id, np.int32)
    padded[:len(ids)] = ids
    return padded, np.arange(max_len) >= len(ids)


def wrong_pad_mask_inverted(ids, max_len=16, pad_id=0):
    padded, mask = truncate_pad(ids, max_len, pad_id)
    return padded, ~mask


def wrong_pad_mask_from_values(ids, max_len=16, pad_id=0):
    padded, _ = truncate_pad(ids, max_len, pad_id)
    return padded, padded == pad_id


def wrong_pad_left(ids, max_len=16, pad_id=0):
    ids = np.asarray(ids, np.int32)[:max_len]
    padded = np.full(max_len, pad_id, np.int32)
    padded[max_len - len(ids):] = ids
    return padded, np.arange(max_len) < max_len - len(ids)
