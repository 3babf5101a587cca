"""Datasets of named features, read in chunks of bounded size.

A dataset is an ``.npz`` file or a folder of ``.npy`` files (each array one feature, its
first axis the example), or a Parquet or CSV table (each column one scalar feature; read
with pyarrow, imported only here). ``open_dataset`` reads only headers; ``Dataset.chunks``
yields ``{feature: array}`` dicts of at most about ``chunk_bytes`` bytes of rows, so a
dataset larger than memory is read with memory bounded by the chunk, never the file.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from .errors import ValidateError

DEFAULT_CHUNK_BYTES = 32 << 20
# The bytes a string cell is counted as when sizing a table's chunks.
_STRING_BYTES = 64


@dataclass(frozen=True)
class Feature:
    """A feature's element dtype (a NumPy dtype name, or ``str``) and per-example shape."""

    dtype: str
    shape: tuple[int, ...]


def _npy_header(f: IO[bytes], where: str) -> tuple[np.dtype, tuple[int, ...]]:
    """Read an ``.npy`` header from ``f``, leaving it at the data."""
    try:
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0(f))
    except (ValueError, OSError, SyntaxError) as e:
        raise ValidateError(f"{where} is not a NumPy .npy array: {e}") from None
    if fortran and len(shape) > 1:
        raise ValidateError(f"{where} is stored in Fortran order: save it C-contiguous "
                            "(np.save(path, np.ascontiguousarray(a)))")
    if dtype.hasobject:
        raise ValidateError(f"{where} holds Python objects: save numbers or fixed-width strings (dtype 'U')")
    if len(shape) == 0:
        raise ValidateError(f"{where} is a scalar: a feature's first axis is the example")
    return dtype, tuple(shape)


class _NpyReader:
    """Rows of one ``.npy`` stream (a file or a member of an ``.npz``), read in order."""

    def __init__(self, opener: Any, where: str):
        self.opener, self.where = opener, where
        with opener() as f:
            self.dtype, shape = _npy_header(f, where)
        self.rows, self.shape = shape[0], shape[1:]
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))

    def read(self) -> Iterator[Any]:
        """A generator: send it a row count, get that many rows."""
        with self.opener() as f:
            _npy_header(f, self.where)
            n = yield None
            done = 0
            while done < self.rows:
                n = min(n, self.rows - done)
                buf = f.read(n * self.row_bytes)
                if len(buf) != n * self.row_bytes:
                    raise ValidateError(f"{self.where} is truncated: {self.rows} examples declared, "
                                        f"{done + len(buf) // max(self.row_bytes, 1)} present")
                done += n
                n = yield np.frombuffer(buf, self.dtype).reshape((n, *self.shape))


class Dataset:
    """A dataset of named features (see the module docstring); ``features`` maps each name
    to its dtype and per-example shape, ``num_examples`` is None for a CSV file until read."""

    def __init__(self, path: str | os.PathLike[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.path = Path(path)
        self.chunk_bytes = int(chunk_bytes)
        if self.chunk_bytes < 1:
            raise ValidateError(f"chunk_bytes={chunk_bytes}: give a positive number of bytes")
        self.features: dict[str, Feature] = {}
        self.num_examples: int | None = None
        if not self.path.exists():
            raise ValidateError(f"{self.path}: no such file or folder")
        if self.path.is_dir():
            self.format = "npy"
            files = sorted(self.path.glob("*.npy"))
            if not files:
                raise ValidateError(f"{self.path} holds no .npy files: a dataset folder holds one NAME.npy per feature")
            self._readers = {p.stem: _NpyReader(lambda p=p: open(p, "rb"), str(p)) for p in files}
        elif self.path.suffix == ".npz":
            self.format = "npz"
            try:
                with zipfile.ZipFile(self.path) as z:
                    members = [m for m in z.namelist() if m.endswith(".npy")]
            except (zipfile.BadZipFile, OSError) as e:
                raise ValidateError(f"{self.path} is not a NumPy .npz file: {e}") from None
            self._readers = {m[:-4]: _NpyReader(lambda m=m: _ZipMember(self.path, m), f"{self.path}:{m}")
                             for m in members}
            if not self._readers:
                raise ValidateError(f"{self.path} holds no arrays")
        elif self.path.suffix in (".parquet", ".pq", ".csv"):
            self.format = "csv" if self.path.suffix == ".csv" else "parquet"
            self._readers = {}
            self._open_table()
            return
        else:
            raise ValidateError(f"{self.path}: expected an .npz file, a folder of .npy files, a .parquet or a "
                                f".csv file")
        rows = {name: r.rows for name, r in self._readers.items()}
        if len(set(rows.values())) > 1:
            raise ValidateError(f"{self.path}: the features have different numbers of examples "
                                f"({', '.join(f'{k}: {v}' for k, v in rows.items())}); the first axis of every "
                                "array is the example")
        self.num_examples = next(iter(rows.values()))
        self.features = {name: Feature(r.dtype.name if r.dtype.kind != "U" else "str", r.shape)
                         for name, r in self._readers.items()}

    # ---- tables (pyarrow) ------------------------------------------------------------------

    def _open_table(self) -> None:
        try:
            import pyarrow as pa
            import pyarrow.csv  # noqa: F401
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ValidateError(f"reading {self.path} needs pyarrow: pip install 'flowjit[validate]'") from None
        try:
            schema = (pa.parquet.ParquetFile(self.path).schema_arrow if self.format == "parquet"
                      else self._csv_reader().schema)
        except (pa.ArrowException, OSError) as e:
            raise ValidateError(f"{self.path} does not parse as {self.format.upper()}: {e}") from None
        for field in schema:
            t = field.type
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                dtype = "str"
            elif pa.types.is_boolean(t):
                dtype = "bool"
            elif pa.types.is_integer(t) or pa.types.is_floating(t):
                dtype = np.dtype(t.to_pandas_dtype()).name
            elif pa.types.is_null(t):
                dtype = "float64"  # an empty CSV column: every value missing
            else:
                raise ValidateError(f"{self.path}: column {field.name!r} has type {t}; features are numbers, "
                                    "booleans or strings (one value per example)")
            self.features[field.name] = Feature(dtype, ())
        if self.format == "parquet":
            self.num_examples = pa.parquet.ParquetFile(self.path).metadata.num_rows

    def _csv_reader(self) -> Any:
        import pyarrow.csv as pcsv
        return pcsv.open_csv(self.path, read_options=pcsv.ReadOptions(block_size=max(self.chunk_bytes, 1 << 16)))

    def _table_batches(self) -> Iterator[Any]:
        import pyarrow as pa
        try:
            if self.format == "parquet":
                row_bytes = sum(_STRING_BYTES if f.dtype == "str" else np.dtype(f.dtype).itemsize
                                for f in self.features.values())
                yield from pa.parquet.ParquetFile(self.path).iter_batches(
                    batch_size=max(1, self.chunk_bytes // max(row_bytes, 1)))
            else:
                yield from self._csv_reader()
        except (pa.ArrowException, OSError) as e:
            raise ValidateError(f"{self.path} does not parse as {self.format.upper()}: {e}") from None

    # ---- chunks ------------------------------------------------------------------------------

    def chunks(self) -> Iterator[dict[str, np.ndarray]]:
        """The dataset from the start, as ``{feature: array}`` chunks of consecutive examples
        (about ``chunk_bytes`` each; at least one example). A table's missing cells are NaN
        (numbers) or None (strings)."""
        if self.format in ("csv", "parquet"):
            for batch in self._table_batches():
                yield {name: _column(col, self.features[name].dtype) for name, col in zip(batch.schema.names,
                                                                                        batch.columns)}
            return
        row_bytes = max(1, sum(r.row_bytes for r in self._readers.values()))
        n = max(1, self.chunk_bytes // row_bytes)
        gens = {name: r.read() for name, r in self._readers.items()}
        for g in gens.values():
            next(g)
        left = self.num_examples or 0
        while left > 0:
            take = min(n, left)
            yield {name: g.send(take) for name, g in gens.items()}
            left -= take
        for g in gens.values():
            g.close()

    def load(self) -> dict[str, np.ndarray]:
        """The whole dataset in memory (model evaluation reads its held-out data whole)."""
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self.features}
        for chunk in self.chunks():
            for name, a in chunk.items():
                parts[name].append(a)
        return {name: (np.concatenate(p) if p else np.empty((0, *self.features[name].shape)))
                for name, p in parts.items()}


def _column(col: Any, dtype: str) -> np.ndarray:
    if dtype == "str":
        return np.asarray(col.to_pylist(), dtype=object)
    if col.null_count and dtype not in ("float32", "float64"):
        return col.to_numpy(zero_copy_only=False).astype(np.float64)
    return col.to_numpy(zero_copy_only=False)


class _ZipMember:
    """A member of a zip file opened for streaming (a context manager giving a binary file)."""

    def __init__(self, path: Path, member: str):
        self.zip = zipfile.ZipFile(path)
        self.file = self.zip.open(member)

    def __enter__(self) -> IO[bytes]:
        return self.file

    def __exit__(self, *exc: object) -> None:
        self.file.close()
        self.zip.close()


def open_dataset(path: str | os.PathLike[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Dataset:
    """The dataset at ``path`` (see the module docstring); ValidateError naming the file when
    it is not one."""
    return Dataset(path, chunk_bytes)
