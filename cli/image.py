"""`epochal image build`: Epochal's default task image, made offline (task_image)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli import render
from cli.client import CliError

app = typer.Typer(help="Build Epochal's task image for the Docker runtime.",
                  no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the image as JSON.")]


@app.command("build", help="Build the default task image from this machine's Debian package "
             "sources (no registry; needs root and a Docker engine). A second build with the "
             "same recipe and harness is a no-op. Prints the image's tag.")
def build(as_json: AsJson = False) -> None:
    import docker.errors

    from task_image import image as task_image

    def say(message: str) -> None:
        sys.stderr.write(f"{message}\n")
        sys.stderr.flush()

    try:
        result = task_image.build(say=say)
    except (RuntimeError, docker.errors.DockerException) as exc:
        raise CliError(f"cannot build the task image: {exc}") from None
    how = "already built" if result.cached else "built"
    say(f"{how} in {result.seconds:.1f} s, {result.size_bytes / 1e6:.0f} MB")
    render.done(as_json, {"tag": result.tag, "cached": result.cached,
                          "seconds": result.seconds, "sizeBytes": result.size_bytes},
                result.tag)


@app.command("tag", help="Print the tag of this installation's default task image.")
def tag(as_json: AsJson = False) -> None:
    from task_image import image as task_image

    found = task_image.task_image_tag()
    render.done(as_json, {"tag": found}, found)
