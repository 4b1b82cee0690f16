"""A full (or read-only) disk while aisql writes a model into its cache is one line naming the
place and what to do (issue 58, cause 18), never a serializer's traceback or "internal error"."""

from __future__ import annotations

import errno

import pytest

from aisql.errors import ModelError
from aisql.paths import build_directory_once


@pytest.mark.parametrize(
    "refusal",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EROFS, "Read-only file system"),
        RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on device\" })"),
    ],
    ids=["ENOSPC", "read-only", "serializer"],
)
def test_a_build_the_disk_refuses_is_one_line_and_leaves_nothing(tmp_path, refusal):
    def build(staging):
        (staging / "half.bin").write_bytes(b"x" * 100)
        raise refusal

    target = tmp_path / "models" / "some-model"
    with pytest.raises(ModelError) as err:
        build_directory_once(target, build, "convert some-model")
    assert err.value.message.startswith(f"cannot convert some-model in {target.parent}: ")
    assert "AISQL_CACHE_DIR" in err.value.hint
    assert list(target.parent.iterdir()) == []  # no half-built model left behind


def test_other_build_errors_are_not_called_a_full_disk(tmp_path):
    def build(staging):
        raise ValueError("a bug in the converter")

    with pytest.raises(ValueError, match="a bug in the converter"):
        build_directory_once(tmp_path / "m", build, "convert m")


def test_the_tiny_model_checks_free_space_before_building(tmp_path, monkeypatch):
    """The tiny model's build on a full disk was an internal error; now it is refused before
    anything is written, in the words of the GGUF path."""
    from aisql.engine.model import gguf, tiny

    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf, "free_disk_bytes", lambda directory: 512 * 1024)
    with pytest.raises(ModelError, match=r"cannot build the tiny model in .*: it needs about \d+ MB of disk, 0.5 MB are free"):
        tiny.tiny_model_dir(tiny.TinyConfig(seed=12345))
    assert not (tmp_path / "cache" / "models").exists() or not any((tmp_path / "cache" / "models").iterdir())
