"""`epochal checkpoint ...`: list an experiment's checkpoints, download one."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from cli import render
from cli.client import ApiError, Client, CliError, master_url

app = typer.Typer(help="Inspect and download checkpoints.", no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]


@app.command("download", help="Download a checkpoint's files into a directory (from shared_fs "
             "or S3 storage, through the master).")
def download(
    ctx: typer.Context,
    uuid: Annotated[str, typer.Argument(metavar="UUID", help="Checkpoint uuid.",
                                        show_default=False)],
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to put its files "
                                              "(made if missing).", show_default=False)],
    as_json: AsJson = False,
) -> None:
    import tarfile  # here: only the download unpacks

    directory.mkdir(parents=True, exist_ok=True)
    count = size = 0
    with Client(master_url(ctx)) as client, client.stream_bytes(
            f"/checkpoints/{uuid}/download") as chunks:
        try:
            with tarfile.open(fileobj=_Reader(chunks), mode="r|") as archive:
                for member in archive:
                    # `data`: nothing outside DIR, no links, devices or set-uid bits.
                    archive.extract(member, directory, filter="data")
                    count, size = count + 1, size + member.size
        except tarfile.TarError as err:
            raise CliError(f"checkpoint {uuid}: the download broke off: {err}") from None
    render.done(as_json, {"uuid": uuid, "directory": str(directory), "files": count,
                          "bytes": size},
                f"Downloaded checkpoint {uuid} into {directory} ({count} files, {size} bytes).")


class _Reader(io.RawIOBase):
    """A file over the answer's chunks, for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


@app.command("list", help="List the checkpoints of an experiment's trials (DELETED ones, "
             "whose files are gone, only with --all or --json).")
def list_checkpoints(
    ctx: typer.Context,
    experiment_id: Annotated[
        int, typer.Argument(metavar="EXPERIMENT_ID", help="Experiment id.", show_default=False)
    ],
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Include DELETED checkpoints.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get_all(f"/experiments/{experiment_id}/checkpoints", "checkpoints")
        metric = None
        if not as_json:
            try:
                experiment = client.get(f"/experiments/{experiment_id}")["experiment"]
                metric = experiment.get("searcherMetric")
            except ApiError:
                metric = None
    if as_json:  # scripts get the server's answer whole, DELETED checkpoints too
        render.print_json(answer)
        return
    checkpoints, deleted = answer["checkpoints"], 0
    if not show_all:
        checkpoints, deleted = render.without_deleted(checkpoints)
    if checkpoints:
        render.show(render.checkpoints_table(checkpoints, metric))
    elif not deleted:
        render.say(f"Experiment {experiment_id} has no checkpoints yet.")
    if deleted:
        render.say(f"{deleted} DELETED checkpoint{'s' if deleted != 1 else ''} not shown "
                   "(--all shows them).")
