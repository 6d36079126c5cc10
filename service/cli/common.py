"""What every ``cq`` command shares: the flags that talk to the API (``--api``, ``--api-key``,
``--local``, ``--json``, ``--request``) and the workload's, the request body built from flags,
the consoles, the progress bar, ``--json`` output, paged reads and the error handling.

Every command builds the same JSON body the API takes (from flags, or ``--request FILE``),
sends it (``--api URL`` or ``--local``), and prints a table, or the raw answer with ``--json``.
Quotes also print Markdown (``--format markdown``) and gate CI jobs (``--fail-on``): exit 3
when the verdict is reject, 4 when the policy warned (see ``service/cli/report.py``). Tables
are built by ``service/cli/tables.py`` to stay legible at 80 columns; with ``--json`` an error
is JSON on stdout too.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

from service.api import presentation as fmt
from service.cli import tables as tb
from service.cli.client import Api, ApiProblemError, CliError
from service.cli.report import FailOn, OutputFormat

ApiUrl = Annotated[str, typer.Option("--api", envvar="CQ_API_URL", show_default=True,
                                     help="The service's base URL.")]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="CQ_API_KEY",
                                            help="API key for writes (env CQ_API_KEY).")]
Local = Annotated[bool, typer.Option("--local", help="Run in process on the local database "
                                     "(CQ_DATABASE_URL or the embedded SQLite), no server.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")]
RequestFile = Annotated[Path | None, typer.Option(
    "--request", exists=True, dir_okay=False, readable=True,
    help="A JSON request body; flags given as well override its fields.")]
Model = Annotated[str | None, typer.Option("--model", help="Model preset, e.g. llama3.1-70b "
                                           "(cq models lists them).")]
Accelerator = Annotated[str | None, typer.Option("--accelerator",
                                                 help="Accelerator id, e.g. h100-sxm5-80gb.")]
Gpus = Annotated[int | None, typer.Option("--gpus", help="GPUs in the job.")]
Tokens = Annotated[float | None, typer.Option("--tokens", help="Training tokens, e.g. 15e12.")]
SeqLen = Annotated[int | None, typer.Option("--seq-len", help="Sequence length (tokens).")]
Batch = Annotated[int | None, typer.Option("--global-batch",
                                           help="Global batch, in sequences.")]
GpuRange = Annotated[str | None, typer.Option(
    "--gpus-range", help="START:STOP:STEP GPU counts to sweep, e.g. 512:4096:512.")]
Format = Annotated[OutputFormat | None, typer.Option(
    "--format", help="json (the API's answer, like --json), table (default) or markdown "
                     "(a pull-request comment).")]
FailOnOption = Annotated[FailOn | None, typer.Option(
    "--fail-on", help="CI gate: exit 3 when the verdict is reject (reject or warn); exit 4 "
                      "when the policy only warned (warn). The output is printed first.")]
Accounting = Annotated[str | None, typer.Option(
    "--accounting", help="commitment (default: cash signed for) or amortised (the job's "
                         "share; needs --utilisation).")]
Utilisation = Annotated[str | None, typer.Option(
    "--utilisation", help="reservation_utilisation_fraction in (0, 1], e.g. 0.7; implies "
                          "--accounting amortised.")]
PolicyOption = Annotated[str | None, typer.Option(
    "--policy", help="A stored policy's name to judge by (default: the server's).")]


PIPED_WIDTH = 200


class _Screen(Console):
    """stdout at the terminal's width, or ``COLUMNS`` when set; piped without ``COLUMNS``, 200
    columns, so that tables stay one row per line for grep and logs. Read at each print, so
    ``COLUMNS=80 cq ...`` (and a test's environment) takes effect."""

    @property
    def size(self) -> ConsoleDimensions:
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS"):
            return ConsoleDimensions(PIPED_WIDTH, 25)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


# Text from the service (warnings, problem details, offer names, policy messages) is printed
# as written: no console markup ("[docs/x]" would vanish, "[bold]" would style) and no emoji
# codes (":warning:" would become a symbol). The few styled labels are ``Text`` parts.
out = _Screen(markup=False, emoji=False)
err = Console(stderr=True, markup=False, emoji=False)


def labelled(label: str, style: str, text: str) -> Text:
    """``label`` in ``style``, a space, then ``text`` exactly as written: the one way ``cq``
    prefixes a warning, note or error to text it did not write."""
    return Text.assemble((label, style), " ", text)


def _table(title: str | None, columns: list[tb.Col | str], *, boxed: bool = False) -> Table:
    return tb.table(title, columns, width=out.width, boxed=boxed)


def _load(request: Path | None) -> dict[str, Any]:
    if request is None:
        return {}
    try:
        body = json.loads(request.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{request}: not a JSON file ({exc})",
                                 param_hint="--request") from None
    if not isinstance(body, dict):
        raise typer.BadParameter(f"{request}: must hold a JSON object", param_hint="--request")
    return body


def _put(body: dict[str, Any], path: str, value: Any) -> None:
    """Sets body[a][b]... = value for a dotted path when value is given."""
    if value is None:
        return
    *parents, leaf = path.split(".")
    node = body
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value


def _put_model_and_training(body: dict[str, Any], model: str | None, tokens: float | None,
                            seq_len: int | None, global_batch: int | None) -> None:
    _put(body, "model", _model(model))
    _put(body, "training.tokens", tokens)
    _put(body, "training.seq_len", seq_len)
    _put(body, "training.global_batch_seqs", global_batch)


def _put_budget_and_deadline(body: dict[str, Any], budget: str | None, currency: str,
                             deadline_days: float | None) -> None:
    if budget is not None:
        body["budget"] = {"amount": budget, "currency": currency}
    _put(body, "deadline_s", None if deadline_days is None else deadline_days * fmt.DAY_S)


def _put_accounting(body: dict[str, Any], accounting: str | None, utilisation: str | None,
                    policy: str | None) -> None:
    _put(body, "accounting", accounting)
    if utilisation is not None:
        body.setdefault("accounting", "amortised")
        body["reservation_utilisation_fraction"] = utilisation
    _put(body, "policy", policy)


def _gpu_range(text: str) -> dict[str, int]:
    try:
        start, stop, step = (int(x) for x in text.split(":"))
    except ValueError:
        raise typer.BadParameter("use START:STOP:STEP, e.g. 512:4096:512",
                                 param_hint="--gpus-range") from None
    return {"start": start, "stop": stop, "step": step}


def _price(text: str) -> str:
    try:
        price = Decimal(text)
    except InvalidOperation:
        price = Decimal(-1)
    if not price.is_finite() or price < 0:
        raise typer.BadParameter("a price per GPU-hour, e.g. 2.10", param_hint="--price")
    return text


def _model(model: str | None) -> dict[str, Any] | None:
    return {"preset": model} if model else None


@contextmanager
def working(label: str) -> Iterator[None]:
    """A progress bar with elapsed time on a terminal; nothing when piped."""
    if not err.is_terminal:
        yield
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        progress.add_task(label, total=None)
        yield


def _emit(answer: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
    else:
        render(answer)


def _output(chosen: OutputFormat | None, as_json: bool,
            allowed: tuple[OutputFormat, ...] = tuple(OutputFormat)) -> OutputFormat:
    """--format, with --json as its alias for json; table by default."""
    if as_json and chosen not in (None, OutputFormat.json):
        raise typer.BadParameter(f"--json and --format {chosen.value} disagree; give one",
                                 param_hint="--format")
    output = OutputFormat.json if as_json else chosen or OutputFormat.table
    if output not in allowed:
        raise typer.BadParameter(f"use {' or '.join(a.value for a in allowed)}",
                                 param_hint="--format")
    return output


MAX_PAGES = 1_000
"""The most pages one paged read follows (200,000 items at 200 a page; the seed's longest
list is about 3,000): a server that kept answering a next page would otherwise loop the CLI
for ever (issue 36's loop audit)."""


def _paged(client: Api, path: str, params: dict[str, Any],
           max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    """Every item of a paged list, following ``next_page_token`` for at most ``max_pages``
    pages; a token the server already gave (a loop) or more pages than that is a CliError."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        page = client.call("GET", path, params={**params, "page_token": token}).json()
        items += page["items"]
        token = page.get("next_page_token")
        if not token:
            return items
        if token in seen:
            raise CliError(f"{path} answered a page token it had already given: the server "
                           "is paging in a loop, so the list was not read to its end")
        seen.add(token)
    raise CliError(f"{path} has more than {max_pages:,} pages; the CLI reads at most that many")


def handled(function: Callable[..., None]) -> Callable[..., None]:
    """Problems and connection errors become a short message and a non-zero exit, never a
    traceback: 1 for a problem the service answered, 2 for anything else."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        as_json = bool(kwargs.get("as_json")) or kwargs.get("output_format") == OutputFormat.json
        try:
            function(*args, **kwargs)
        except ApiProblemError as problem:
            if as_json:
                _json_error(problem.body or {"title": problem.title, "status": problem.status,
                                             "detail": problem.detail}, exit_code=1)
            err.print(labelled(f"{problem.status} {problem.title}:", "bold red",
                               str(problem.detail)), highlight=False)
            for error in problem.errors:
                where = error.get("field") or error.get("loc") or ""
                err.print(f"  · {where}: {error.get('message') or error.get('msg') or ''}",
                          highlight=False)
            if not problem.errors and problem.body.get("field"):
                err.print(f"  · field: {problem.body['field']}", highlight=False)
            raise typer.Exit(code=1) from None
        except CliError as exc:
            if as_json:
                _json_error({"title": "cq could not complete the command", "detail": str(exc)},
                            exit_code=2)
            err.print(labelled("error:", "bold red", str(exc)), highlight=False)
            raise typer.Exit(code=2) from None
        except typer.BadParameter as exc:
            if as_json:
                _json_error({"title": "Invalid option", "detail": exc.format_message(),
                             "option": exc.param_hint}, exit_code=2)
            raise

    return wrapper


def _json_error(problem: dict[str, Any], exit_code: int) -> None:
    """With --json an error is JSON on stdout too (the problem document the service sent, or
    one in its shape), so a script reads one stream; the exit code still tells failure."""
    sys.stdout.write(json.dumps({**problem, "exit_code": exit_code}, indent=2) + "\n")
    raise typer.Exit(code=exit_code)


def _defaults(body: dict[str, Any]) -> None:
    """Only seq_len and the batch get defaults here (Llama 3's 8,192 tokens and 512
    sequences); any other missing field is left for the API to name in its problem."""
    if "training" in body or "model" in body:
        training = body.setdefault("training", {})
        training.setdefault("seq_len", 8192)
        training.setdefault("global_batch_seqs", 512)
