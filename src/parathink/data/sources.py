"""Problem sources: one record schema for every data set, one loader for every place data lives.

Schema (what every stage reads): ``id`` (unique across sources: ``<source>-<native id>``), ``source``,
``problem``, ``answer`` (a string; math-verify compares it), and ``level`` when the source has one.

Where the rows come from is told by a URI:
- ``None`` or ``hub:ORG/NAME``: the Hugging Face hub (the source's default id when ``None``), through a lazy
  ``datasets`` import; our machines cannot reach it, and ``SourceUnavailable`` says so in one line;
- ``s3://bucket/key.jsonl|.parquet``: boto3, with endpoint, credentials and region from the environment only
  (``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``, ... as boto3 reads them);
- anything else: a local ``.jsonl``/``.json``/``.parquet`` file, or a directory of them (read in name order).

How a row becomes a record is told by the source's layout (``LAYOUTS``): the column layout each data set has on
the hub (GSM8K's ``question``/``answer`` with the final answer after ``####``, DAPO-Math-17k's chat ``prompt`` and
``reward_model.ground_truth``, ...). Local and S3 copies keep the hub's columns, so one layout serves all three.
The ``verl`` layout (``parathink.data.verl``: ``data_source``, chat ``prompt``, ``reward_model.ground_truth``) is
any data set's: ``source: verl`` reads it, and a named source whose file has verl's columns instead of its own is
read as verl (the loader says so on stderr). ``data_source`` picks the rows of one set from a file holding several;
rows that repeat one problem are one record whose ``repeats`` counts them (the eval's default ``k``).
"""

from __future__ import annotations

import io
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from parathink import jsonl
from parathink.data import verl
from parathink.errors import BadInput
from parathink.rundir import provenance


class SourceError(BadInput):
    """A source that cannot be read as asked; the message names the source, the file and the line."""


class SourceUnavailable(SourceError):
    """The hub (or another remote) cannot be reached from here."""

    exit_code = 1  # may come back: worth a retry


# ---------------------------------------------------------------------------------------------- layouts


def _clean_answer(value: Any) -> str:
    """Answers as strings; integral floats (AMC23 stores 27.0) lose their ``.0``. A list, a bool or an object is
    no answer (its text would be graded: ``["1"]`` against 1 counted correct)."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise TypeError(f"'answer' must be a string or a number, got {type(value).__name__}")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _gsm8k(row: Mapping, index: int, split: str) -> dict:
    solution = row["answer"]
    if "####" not in solution:
        raise KeyError("answer has no '####' final-answer marker")
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return {"id": f"{split}-{index}", "problem": row["question"], "answer": final}


def _dapo(row: Mapping, index: int, split: str) -> dict:
    """DAPO-Math-17k: the verl layout, its "Answer:" instruction wrapper stripped (``verl.WRAPPERS``)."""
    extra = row.get("extra_info") or {}
    return {"id": str(extra.get("index", f"{split}-{index}")),
            "problem": verl.strip_wrapper(verl.user_message(row["prompt"])), "answer": verl.ground_truth(row)}


def _math500(row: Mapping, index: int, split: str) -> dict:
    return {"id": str(row.get("unique_id", index)), "problem": row["problem"], "answer": _clean_answer(row["answer"]),
            "level": row.get("level")}


def _problem_answer(row: Mapping, index: int, split: str) -> dict:
    """AIME/AMC copies: ``problem`` (or ``question``), ``answer``, optional ``id``."""
    problem = row["problem"] if row.get("problem") else row["question"]
    return {"id": str(row.get("id", index)), "problem": problem, "answer": _clean_answer(row["answer"])}


def _native(row: Mapping, index: int, split: str) -> dict:
    """Our own schema (e.g. a file a stage wrote): kept as it is, ids included."""
    out = {"id": str(row.get("id", index)), "problem": row["problem"], "answer": _clean_answer(row["answer"])}
    if row.get("level") is not None:
        out["level"] = row["level"]
    return out


@dataclass(frozen=True)
class SourceLayout:
    """A data set: where it lives on the hub and how one of its rows becomes a record."""

    name: str
    hub_id: str | None
    hub_config: str | None
    hub_split: str
    to_record: Callable[[Mapping, int, str], dict]


LAYOUTS: dict[str, SourceLayout] = {
    lay.name: lay
    for lay in [
        SourceLayout("gsm8k", "openai/gsm8k", "main", "train", _gsm8k),
        SourceLayout("dapo_math_17k", "BytedTsinghua-SIA/DAPO-Math-17k", None, "train", _dapo),
        SourceLayout("math500", "HuggingFaceH4/MATH-500", None, "test", _math500),
        SourceLayout("aime24", "HuggingFaceH4/aime_2024", None, "train", _problem_answer),
        SourceLayout("aime25", "math-ai/aime25", None, "test", _problem_answer),
        SourceLayout("amc23", "math-ai/amc23", None, "test", _problem_answer),
        SourceLayout("native", None, None, "train", _native),
        SourceLayout("verl", None, None, "train", verl.to_record),
    ]
}


# ---------------------------------------------------------------------------------------------- readers


def _rows_from_bytes(data: bytes, where: str) -> Iterator[dict]:
    if where.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            # No Arrow thread pools: a pool still running at exit aborts the process now and then (SIGABRT
            # after the work is done), and a file that fits in memory gains little from threads.
            table = pq.read_table(io.BytesIO(data), use_threads=False, pre_buffer=False)
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise SourceError(f"{where}: not a readable Parquet file ({e})") from None
        yield from table.to_pylist()
    elif where.endswith((".jsonl", ".json")):
        yield from (row for _, row in jsonl.read(data, where, error=SourceError))
    else:
        raise SourceError(f"{where}: unknown file type; expected .jsonl, .json or .parquet")


def _s3_client():
    import boto3

    # boto3 reads credentials and region from the environment; the endpoint (MinIO, moto) too, explicitly here
    # so that older boto3 releases without AWS_ENDPOINT_URL support behave the same.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return boto3.client("s3", endpoint_url=endpoint or None)


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise SourceError(f"{uri}: no bucket in the s3:// URI")
    return bucket, key


def _rows_from_s3(uri: str) -> Iterator[dict]:
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = _split_s3(uri)
    client = _s3_client()
    try:
        if key and not key.endswith("/"):
            keys = [key]
        else:  # a prefix: every data file under it, in name order
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
            keys = sorted(o["Key"] for p in pages for o in p.get("Contents", [])
                          if o["Key"].endswith((".jsonl", ".json", ".parquet")))
            if not keys:
                raise SourceError(f"{uri}: no .jsonl/.json/.parquet object under this prefix")
        for k in keys:
            body = client.get_object(Bucket=bucket, Key=k)["Body"].read()
            yield from _rows_from_bytes(body, f"s3://{bucket}/{k}")
    except ClientError as e:
        raise SourceError(f"{uri}: {e.response.get('Error', {}).get('Message') or e}") from None
    except BotoCoreError as e:
        raise SourceUnavailable(f"{uri}: S3 not reachable ({e})") from None


def _rows_from_local(path: Path) -> Iterator[dict]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json", ".parquet"))
        if not files:
            raise SourceError(f"{path}: no .jsonl/.json/.parquet file in this directory")
    elif path.is_file():
        files = [path]
    else:
        raise SourceError(f"{path}: no such file or directory")
    for f in files:
        yield from _rows_from_bytes(f.read_bytes(), str(f))


def _rows_from_hub(hub_id: str, config: str | None, split: str) -> Iterator[dict]:
    try:
        import datasets  # lazy: heavy, and useless where the hub is unreachable
    except ImportError:
        raise SourceUnavailable(f"hub:{hub_id}: the `datasets` package is not installed; pass a local "
                                f"JSONL/Parquet path or an s3:// URI instead") from None
    try:
        ds = datasets.load_dataset(hub_id, config, split=split)
    except Exception as e:  # offline / DNS / 404 all end here; say which set could not be had
        raise SourceUnavailable(f"hub:{hub_id} ({split}) is not reachable: {type(e).__name__}: {e}. "
                                f"Pass a local JSONL/Parquet path or an s3:// URI instead") from None
    yield from ds


def read_rows(uri: str | os.PathLike) -> Iterator[dict]:
    """The raw rows (dicts) at a local path or s3:// URI, in file order."""
    uri = str(uri)
    provenance.note_read(uri)  # the stage reading it is stale once the file changes
    if uri.startswith("s3://"):
        return _rows_from_s3(uri)
    return _rows_from_local(Path(uri))


# ---------------------------------------------------------------------------------------------- loading


def _note(msg: str) -> None:
    print(f"[parathink] data: {msg}", file=sys.stderr)


def _to_record(name: str, layout: SourceLayout, row: Mapping, index: int, split: str, where: str) -> dict:
    """Source ``name``'s record of one row, read with ``layout`` (the source's own, or verl's)."""
    try:
        fields = layout.to_record(row, index, split)
    except (KeyError, TypeError, IndexError) as e:
        raise SourceError(f"{where}: row {index + 1} does not have the {layout.name} layout "
                          f"(missing or malformed {e}); columns: {sorted(row)}") from None
    if not str(fields["problem"]).strip() or fields["answer"] in ("", "None"):
        raise SourceError(f"{where}: row {index + 1} has an empty problem or answer")
    record = {"id": f"{name}-{fields['id']}" if name != "native" else fields["id"],
              "source": row.get("source", name) if name == "native" else name,
              "problem": str(fields["problem"]), "answer": fields["answer"]}
    for key in ("level", "data_source"):
        if fields.get(key) is not None:
            record[key] = fields[key]
    return record


def _select(numbered: Iterable[tuple[int, dict]], data_source: Any, where: str) -> Iterator[tuple[int, dict]]:
    """The rows of the data source(s) asked for: a combined verl file holds several sets."""
    wanted = [str(data_source)] if isinstance(data_source, (str, int)) else [str(d) for d in data_source]
    found: Counter = Counter()
    for i, row in numbered:
        if "data_source" not in row:
            # A hub layout's file holds one set; the spec's data_source names that set's rows in a verl file.
            _note(f"{where}: no data_source column ({', '.join(wanted)} applies to verl files); every row read")
            yield i, row
            yield from numbered
            return
        found[str(row["data_source"])] += 1
        if str(row["data_source"]) in wanted:
            yield i, row
    missing = [w for w in wanted if not found[w]]
    if missing:
        have = ", ".join(f"{k} ({n} rows)" for k, n in found.items()) or "no rows"
        raise SourceError(f"{where}: no row has data_source {', '.join(missing)}; the file has {have}")


def _reading(layout: SourceLayout, row: Mapping, index: int, split: str) -> tuple | None:
    """(problem, answer) of ``row`` read with ``layout``; None when the row does not have that layout."""
    try:
        fields = layout.to_record(row, index, split)
    except (KeyError, TypeError, IndexError):
        return None
    return fields["problem"], fields["answer"]


def _pick_layout(name: str, numbered: Iterator[tuple[int, dict]], split: str,
                 where: str) -> tuple[SourceLayout, Iterator[tuple[int, dict]]]:
    """Source ``name``'s own layout, or verl's when the file has verl's columns instead. The first row decides;
    stderr says so when verl reads a named source's file, or when both layouts fit and read it differently (a
    verl file that kept a ``problem`` column beside its wrapped prompt). DAPO's own layout is verl-shaped: no note."""
    own, verl_layout = LAYOUTS[name], LAYOUTS["verl"]
    first = next(numbered, None)
    if first is None:
        return own, iter(())
    numbered = chain([first], numbered)
    if own is verl_layout:
        return own, numbered
    as_own, as_verl = (_reading(lay, first[1], first[0], split) for lay in (own, verl_layout))
    if as_own is None and as_verl is not None:
        _note(f"{where}: columns of the verl layout, not of {name}'s; read as verl")
        return verl_layout, numbered
    if as_own is not None and as_verl is not None and as_own != as_verl:
        _note(f"{where}: columns fit both the {name} and the verl layout, which read row {first[0] + 1} "
              f"differently; read as {name} (source: verl reads it as verl)")
    return own, numbered


def _merge_repeats(numbered: Iterable[tuple[int, dict]], where: str) -> list[dict]:
    """One record per problem, in file order: rows that repeat a problem (same data source, problem and answer)
    count in its ``repeats``; an id repeated on another problem is an error."""
    by_problem: dict[tuple, dict] = {}
    row_of: dict[str, int] = {}
    for i, rec in numbered:
        first = by_problem.setdefault((rec.get("data_source"), rec["problem"], rec["answer"]), rec)
        if first is not rec:
            first["repeats"] = first.get("repeats", 1) + 1
        elif rec["id"] in row_of:
            raise SourceError(f"{where}: row {i + 1} repeats id {rec['id']!r} of row {row_of[rec['id']] + 1} "
                              f"on another problem")
        else:
            row_of[rec["id"]] = i
    return list(by_problem.values())


def repeats(records: Iterable[Mapping]) -> Counter:
    """``{rows per problem: problems}`` of records from ``load_source`` (Parallel-R1's AIME rows: ``{16: 30}``)."""
    return Counter(int(r.get("repeats", 1)) for r in records)


def load_source(name: str, uri: str | os.PathLike | None = None, *, split: str | None = None,
                limit: int | None = None, data_source: Any = None) -> list[dict]:
    """Records of source ``name`` (a key of ``LAYOUTS``) from ``uri`` (see the module docstring): one per problem,
    with ``repeats`` when rows repeat it. ``data_source`` (a name or a list) keeps those sets' rows; ``limit``
    keeps the first problems."""
    if name not in LAYOUTS:
        raise SourceError(f"unknown source {name!r}; expected one of {sorted(LAYOUTS)} or 'synthetic'")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise SourceError(f"source {name!r}: limit must be an integer >= 1, got {limit!r}")
    layout = LAYOUTS[name]
    split = split or layout.hub_split
    if uri is None or str(uri).startswith("hub:"):
        hub_id = str(uri)[len("hub:"):] if uri is not None else layout.hub_id
        if hub_id is None:
            raise SourceError(f"source {name!r} has no hub id; give a local path or s3:// URI")
        rows: Iterable[dict] = _rows_from_hub(hub_id, layout.hub_config, split)
        where = f"hub:{hub_id}"
    else:
        rows, where = read_rows(uri), str(uri)
    numbered: Iterator[tuple[int, dict]] = iter(enumerate(rows))
    if data_source is not None:
        numbered = _select(numbered, data_source, where)
    if uri is not None and not str(uri).startswith("hub:"):  # a hub set has its own layout; a copy may not
        layout, numbered = _pick_layout(name, numbered, split, where)
    records = _merge_repeats(((i, _to_record(name, layout, row, i, split, where)) for i, row in numbered), where)
    return records[:limit] if limit is not None else records


def load_problems(spec: Mapping[str, Any], seed: int = 0) -> list[dict]:
    """Problems from one config entry: ``{source: synthetic, level, split, n, seed?}`` or
    ``{source: gsm8k|dapo_math_17k|...|verl, uri?, split?, limit?, data_source?}``."""
    spec = dict(spec)
    source = spec.get("source")
    if source == "synthetic":
        from parathink.data import synthetic

        missing = [k for k in ("level", "split", "n") if spec.get(k) is None]
        if missing:
            raise SourceError(f"synthetic problem set {spec} lacks {missing}")
        return synthetic.generate(*synthetic.check_spec(spec, f"synthetic problem set {spec}", seed))
    if not source:
        raise SourceError(f"problem set {spec} has no 'source'")
    return load_source(source, spec.get("uri"), split=spec.get("split"), limit=spec.get("limit"),
                       data_source=spec.get("data_source"))
