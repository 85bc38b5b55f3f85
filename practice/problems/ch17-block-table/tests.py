import random

from solution import block_table_row

EXAMPLES = ["test_statement_example", "test_bad_pages_are_refused"]


def _raises(*args):
    """True if block_table_row(*args) raises ValueError, False if it returns; other exceptions fail."""
    try:
        block_table_row(*args)
    except ValueError:
        return True
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"block_table_row{args!r} raised {type(e).__name__}: {e}; expected ValueError") from e
    return False


def oracle(row, seq_len, page_size):
    """Independent check, position by position: the page list, or None if the row is not paged."""
    if page_size < 1 or not 0 <= seq_len <= len(row):
        return None
    pages = []
    for pos in range(seq_len):
        slot = row[pos]
        if slot < 0 or slot % page_size != pos % page_size:
            return None
        page = slot // page_size
        if pos % page_size == 0:
            pages.append(page)
        elif pages[-1] != page:
            return None
    return pages


def test_statement_example():
    row = [8, 9, 10, 11, 0, 1, 2, 3, 20, 21, -1, -1]
    got = block_table_row(row, 10, 4)
    assert got == [2, 0, 5], f"got {got}, expected [2, 0, 5]"
    assert block_table_row([8, 9, 10, 11], 0, 4) == [], "seq_len 0: no pages"
    assert _raises([8, 9, 11, 10], 4, 4), "slots 11 and 10 are swapped: ValueError expected"
    assert _raises([2, 3, 4, 5], 4, 4), "slot 2 is not the start of a page of 4: ValueError expected"


def test_partial_last_page_and_ignored_tail():
    row = [12, 13, 14, 3, 4, -1]
    assert block_table_row(row, 5, 3) == [4, 1], f"got {block_table_row(row, 5, 3)}"
    assert block_table_row(row, 4, 3) == [4, 1], "one position of the second page is enough to need it"
    assert block_table_row(row, 3, 3) == [4], "exactly one full page"
    assert block_table_row([6, 7, 999, 999], 2, 2) == [3], "positions from seq_len on are never looked at"


def test_page_size_one_is_the_row_itself():
    row = [7, 3, 12, 5, 0]
    assert block_table_row(row, 5, 1) == row, "with page_size 1 every slot is its own page"
    assert block_table_row(row, 2, 1) == [7, 3]


def test_bad_pages_are_refused():
    assert _raises([4, 5, 6, 8], 4, 4), "last slot jumps out of page 1"
    assert _raises([4, 5, 6, 7, 9], 5, 4), "second page starts at slot 9, not a multiple of 4"
    assert _raises([4, 5, 6, 7, -1], 5, 4), "position 4 is unmapped (-1)"
    assert _raises([-1], 1, 1), "slot -1 is unmapped, even with page_size 1"
    assert _raises([0, 1, 2, 3, 0, 1], 6, 2) is False, "reusing a page twice is not this function's business"


def test_bad_arguments_are_refused():
    assert _raises([0, 1], 3, 2), "seq_len 3 > len(row) 2"
    assert _raises([0, 1], -1, 2), "seq_len -1"
    assert _raises([0, 1], 2, 0), "page_size 0"
    assert _raises([0, 1], 2, -2), "page_size -2"
    assert block_table_row([], 0, 16) == [], "an empty row with seq_len 0 is fine"


def test_random_rows_against_an_oracle():
    rng = random.Random(17)
    for trial in range(400):
        page_size = rng.choice([1, 2, 3, 4, 8, 16])
        n_pages = rng.randint(0, 12)
        pages = rng.sample(range(64), n_pages)
        row = [p * page_size + j for p in pages for j in range(page_size)]
        row += [-1] * rng.randint(0, 5)
        seq_len = rng.randint(max(0, (n_pages - 1) * page_size + 1), n_pages * page_size) if n_pages else 0
        if rng.random() < 0.5 and seq_len:  # corrupt one used position
            pos = rng.randrange(seq_len)
            row[pos] = rng.choice([-1, row[pos] + 1, row[pos] - 1, rng.randrange(64 * page_size)])
        want = oracle(row, seq_len, page_size)
        what = f"trial {trial}: row={row}, seq_len={seq_len}, page_size={page_size}"
        if want is None:
            assert _raises(row, seq_len, page_size), f"{what}: not a valid paged row, ValueError expected"
        else:
            got = block_table_row(row, seq_len, page_size)
            assert got == want, f"{what}: got {got}, expected {want}"
