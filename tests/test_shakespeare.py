"""LEAF Shakespeare format: the loader (per-speaker natural partition, LEAF's alphabet) and
download_leaf against a local HTTP server on 127.0.0.1 (no other network)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading

import numpy as np
import pytest

from decentlearn.data import ChecksumError, DownloadError, load_dataset, make_partition
from decentlearn.data.shakespeare import LETTERS, download_leaf

SEQ = 10


def _leaf_json(users: dict[str, list[str]]) -> bytes:
    """LEAF's format; every line of a user gives samples (the SEQ characters, the next one)."""
    user_data = {}
    for user, lines in users.items():
        xs, ys = [], []
        for text in lines:
            for i in range(len(text) - SEQ):
                xs.append(text[i:i + SEQ])
                ys.append(text[i + SEQ])
        user_data[user] = {"x": xs, "y": ys}
    return json.dumps({"users": list(users), "num_samples": [len(v["y"]) for v in
                                                              user_data.values()],
                       "user_data": user_data}).encode()


TRAIN = {"HAMLET": ["To be, or not to be: that is the question.", "Words, words, words."],
         "OPHELIA": ["O, what a noble mind is here o'erthrown!"],
         "POLONIUS": ["Brevity is the soul of wit."]}
TEST = {"HAMLET": ["The rest is silence."], "OPHELIA": ["There's rosemary, that's for rem"],
        "POLONIUS": ["Neither a borrower nor a lender be"]}


@pytest.fixture
def server(tmp_path):
    folder = tmp_path / "srv"
    (folder / "train").mkdir(parents=True)
    (folder / "test").mkdir()
    handler = type("H", (http.server.SimpleHTTPRequestHandler,),
                   {"log_message": lambda self, *a: None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", folder
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _publish(folder, files: dict[str, bytes], manifest_override: dict[str, bytes] | None = None):
    lines = []
    for rel, data in files.items():
        (folder / rel).write_bytes(data)
        digest = hashlib.sha256((manifest_override or {}).get(rel, data)).hexdigest()
        lines.append(f"{digest}  {rel}")
    (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def test_download_and_load_natural_partition(server, tmp_path):
    url, folder = server
    _publish(folder, {"train/all_data_0.json": _leaf_json({k: TRAIN[k] for k in ("HAMLET",
                                                                                   "OPHELIA")}),
                      "train/all_data_1.json": _leaf_json({"POLONIUS": TRAIN["POLONIUS"]}),
                      "test/all_data_0.json": _leaf_json(TEST)})
    root = download_leaf(tmp_path / "data", url)
    assert sorted(p.name for p in (root / "train").iterdir()) == ["all_data_0.json",
                                                                  "all_data_1.json"]
    ds = load_dataset("shakespeare", root, n_peers=2)
    # the two speakers with most training samples: HAMLET (32 + 10), OPHELIA (30)
    assert ds.n_classes == len(LETTERS) == 80 and ds.input_shape == (SEQ,)
    hamlet = [t[i:i + SEQ + 1] for t in TRAIN["HAMLET"] for i in range(len(t) - SEQ)]
    ophelia = [t[i:i + SEQ + 1] for t in TRAIN["OPHELIA"] for i in range(len(t) - SEQ)]
    expected = hamlet + ophelia
    assert ds.n_train == len(expected)
    decoded = ["".join(LETTERS[int(c)] for c in x) + LETTERS[y]
               for x, y in zip(ds.x_train, ds.y_train)]
    assert decoded == expected
    np.testing.assert_array_equal(ds.groups, [0] * len(hamlet) + [1] * len(ophelia))
    part = make_partition("natural", ds.y_train, 2, groups=ds.groups)
    assert part.sizes.tolist() == [len(hamlet), len(ophelia)]
    n_test = sum(len(t) - SEQ for k in ("HAMLET", "OPHELIA") for t in TEST[k])
    assert ds.n_test == n_test
    # a second call finds the files valid and downloads nothing new
    (folder / "train" / "all_data_0.json").unlink()
    download_leaf(tmp_path / "data", url)
    assert load_dataset("shakespeare", root, n_peers=3).n_train > ds.n_train
    with pytest.raises(ValueError, match="3 speakers .* n_peers=4"):
        load_dataset("shakespeare", root, n_peers=4)


def test_checksum_mismatch_leaves_no_file(server, tmp_path):
    url, folder = server
    good = _leaf_json(TEST)
    _publish(folder, {"train/a.json": good, "test/a.json": good},
             manifest_override={"test/a.json": b"something else"})
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        download_leaf(tmp_path / "data", url)
    assert not (tmp_path / "data" / "test" / "a.json").exists()
    assert not list((tmp_path / "data" / "test").glob(".*part"))


def test_missing_manifest_and_bad_manifest(server, tmp_path):
    url, folder = server
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_leaf(tmp_path / "d", url)
    (folder / "SHA256SUMS").write_text("0" * 64 + "  ../etc/passwd\n")
    with pytest.raises(ValueError, match="line 1"):
        download_leaf(tmp_path / "d", url)


def test_loader_errors(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    (tmp_path / "train" / "a.json").write_bytes(_leaf_json({"X": ["abc\u00e9defghijklmnop"]}))
    (tmp_path / "test" / "a.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a LEAF JSON"):
        load_dataset("shakespeare", tmp_path)
    (tmp_path / "test" / "a.json").write_bytes(_leaf_json(TEST))
    with pytest.raises(ValueError, match="not in LEAF's Shakespeare alphabet"):
        load_dataset("shakespeare", tmp_path)
    with pytest.raises(ValueError, match="no official download"):
        load_dataset("shakespeare", tmp_path, download=True)
