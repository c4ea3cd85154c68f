"""`tracer record` (run a scenario under a profiler, write a run directory) and `tracer scenarios` (list them)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.text import Text

from tracer.analysis.overlap import hidden_pct
from tracer.cli import TracerCommand, app
from tracer.cli.explain import findings_lines
from tracer.errors import UsageError
from tracer.files.rundir import describe_host_load
from tracer.record.command import record_command
from tracer.record.profiler import ENV_STACKS
from tracer.record.scenario import record as do_record

# The scenarios are imported where a command needs them: they import torch (seconds), which `tracer record
# --help` and `tracer record -- COMMAND` do without.


def _s(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def render_run(meta: dict[str, Any], summary: dict[str, Any], path: Path) -> list[Any]:
    """Rich renderables: wall times, derived figures, checks, overlap per GPU, where the run is."""
    from rich import box
    from rich.table import Table

    out: list[Any] = []
    devices = ", ".join(meta["devices"])
    gpus = ", ".join(f"{k}: {v}" for k, v in meta.get("gpu_names", {}).items())
    out.append(Text.assemble(
        (meta["scenario"], "bold"),
        f"  variant {meta['variant']}  ·  {meta['mode']} ({devices}{'; ' + gpus if gpus else ''})",
        f"  ·  backend {meta['backend']}",
    ))
    times = Table(box=box.SIMPLE_HEAD, title="Wall time (ms)", caption="devices synchronised before and after")
    times.add_column("variant / part")
    times.add_column("ms", justify="right")
    times.add_column("", justify="left")
    unprofiled = set(meta.get("unprofiled_times", []))
    samples = meta.get("wall_time_samples_s") or {}  # absent in runs recorded before repeats existed
    for name, secs in meta["wall_times_s"].items():
        how = "reference, not profiled" if name in unprofiled else ""
        if len(samples.get(name, ())) > 1:
            how += f"{'; ' if how else ''}median of {len(samples[name])}"
        times.add_row(name, _s(secs), how)
    caveats = meta.get("caveats") or []
    # What this machine cannot show comes before any figure: the derived figures are then side notes.
    for caveat in caveats:
        out.append(Text(f"caveat: {caveat}", style="bold yellow"))
    out.append(times)
    if meta.get("derived"):
        # "copy time hidden" here is an estimate from wall times; the per-GPU table's comes from the timeline
        title = "Derived from the wall times"
        if caveats:
            title = f"Side notes, derived from the wall times (see the caveat{'s' if len(caveats) > 1 else ''} above)"
        d = Table(box=box.SIMPLE_HEAD, title=title, style="dim" if caveats else "")
        d.add_column("figure")
        d.add_column("value", justify="right")
        for k, v in meta["derived"].items():
            if "hidden" in k or "share" in k:  # fractions read best as percentages
                d.add_row(k, f"{100 * float(v):.0f}%")
            else:
                d.add_row(k, f"{v:,.3f}" if not float(v).is_integer() else f"{int(v):,}")
        out.append(d)
    devs = summary.get("devices") or {}
    if devs:
        t = Table(box=box.SIMPLE_HEAD, title="Per GPU (ms), profiled window",
                  caption="overlap = copy time hidden behind compute, on the timeline")
        for col in ("GPU", "kernels", "copies", "compute", "copy", "overlap", "hidden"):
            t.add_column(col, justify="right")
        for dev, v in devs.items():
            pct = hidden_pct(v["overlap_ns"], v["copy_ns"])  # the one definition of "copy hidden"
            hidden = f"{pct:.0f}%" if pct is not None else "–"
            t.add_row(dev, f"{v['kernels']:,}", f"{v['memcpys']:,}", f"{v['compute_ns'] / 1e6:,.1f}",
                      f"{v['copy_ns'] / 1e6:,.1f}", f"{v['overlap_ns'] / 1e6:,.1f}", hidden)
        out.append(t)
    checks = meta.get("checks", {})
    ok = all(c["ok"] for c in checks.values())
    out.append(Text(
        ("checks passed: " if ok else "CHECKS FAILED: ") + "; ".join(checks),
        style="green" if ok else "bold red",
    ))
    for note in meta.get("notes", []):
        out.append(Text(f"note: {note}", style="dim"))
    if meta.get("host_load"):
        out.append(Text(f"note: {describe_host_load(meta['host_load'])}", style="dim"))
    out.append(Text.assemble("run written to ", (str(path), "bold"),
                             f"  (`tracer summary {path}` for the full summary)"))
    return out


@app.command(cls=TracerCommand)
def record(
    ctx: typer.Context,
    scenario: Annotated[
        str | None, typer.Argument(help="Scenario name; `tracer scenarios` lists them. Or, after `--`, a command.")
    ] = None,
    device: Annotated[
        str, typer.Option("--device", "-d", help="auto | cpu | cuda | cuda:0,cuda:1,... (one GPU: streams stand in "
                                                 "for devices; CPU: threads do)")
    ] = "auto",
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory that receives the run directory.")] = Path("runs"),
    backend: Annotated[str, typer.Option("--backend", "-b", help="torch (torch.profiler) or nsys (Nsight Systems).")]
    = "torch",
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="NAME=VALUE, repeatable: e.g. -p n=10 -p size=1000 -p variant=side-stream."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the run directory's path.")] = False,
    steps: Annotated[
        str | None,
        typer.Option("--steps", help="With a command: WAIT,WARMUP,ACTIVE[,REPEAT] optimizer steps "
                                     "(torch.profiler.schedule); default: every step."),
    ] = None,
    delay: Annotated[float | None, typer.Option("--delay", help="With a command: start recording at the first "
                                                                "optimizer step after this many seconds.")] = None,
    duration: Annotated[float | None, typer.Option("--duration", help="With a command: stop at the first optimizer "
                                                                      "step this many seconds after the "
                                                                      "start.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="With a command: the run directory's name "
                                                            "(default: SCRIPT-YYYYmmdd-HHMMSS).")] = None,
    stacks: Annotated[
        bool | None,
        typer.Option("--stacks/--no-stacks", help="Record Python stacks (torch.profiler's with_stack=True; with "
                     "--backend nsys, nsys' Python backtraces with CPU sampling), so that `tracer lines` and the "
                     "findings name the lines of your code; off by default (it slows a launch-bound step by a "
                     "quarter: docs/lines.md). Default: $TRACER_STACKS (1 or 0), else off."),
    ] = None,
) -> None:
    """Run SCENARIO, or your own command, under a profiler and write a run directory: trace, Parquet timeline,
    meta.json, summary.json.

    `tracer record -- python train.py --lr 0.1` records every Python process the command starts that imports
    torch (torch.profiler from the import until the process exits, a ProfilerStep#N range per optimizer step);
    `tracer record -- torchrun --nproc-per-node 2 train.py` writes one trace per rank into one run. tracer exits
    with the command's exit code. docs/recording.md says how it works.

    The directory appears complete or not at all (Ctrl-C or a failing correctness check leave nothing).
    """
    if stacks is not None:
        # (every process the recording starts reads it: this one's scenario, a command's, a job's ranks)
        os.environ[ENV_STACKS] = "1" if stacks else "0"
    command = (ctx.obj or {}).get("command")
    if command is not None:
        if scenario is not None:
            raise UsageError("", f"give a scenario ({scenario}) or a command after '--', not both")
        _record_command(command, out=out, name=name, steps=steps, delay=delay, duration=duration, quiet=quiet,
                        backend=backend)
        return
    if scenario is None:
        raise UsageError("", "name a scenario (`tracer scenarios` lists them) or a command after '--' "
                             "(tracer record -- python train.py; try 'tracer record --help')")
    if steps is not None or delay is not None or duration is not None or name is not None:
        raise UsageError("", "--steps, --delay, --duration and --name are for a command after '--'")
    from tracer.scenarios import ScenarioError, parse_param_args  # (torch: see the top)

    try:
        params = parse_param_args(param)
    except ScenarioError as exc:
        raise UsageError("", str(exc)) from None
    err = Console(stderr=True)
    console = Console()
    status = err.status("starting …") if (err.is_terminal and not quiet) else None

    def progress(msg: str) -> None:
        if status is not None:
            status.update(msg)

    if status is not None:
        status.start()
    try:
        run = do_record(scenario, device=device, out=out, backend=backend, params=params, progress=progress)
    finally:
        if status is not None:
            status.stop()
    if quiet:
        print(run.path)
        return
    for r in render_run(run.meta, run.summary, run.path):
        console.print(r)
    _print_findings(run.path)


def _print_findings(path: Path) -> None:
    """The run's top 3 findings, one line each (`tracer explain` has them all)."""
    lines = findings_lines(path, 3)
    for line in lines:
        print(line)
    if lines:
        print(f"next: tracer explain {path}   (every finding, the critical path)")


def _record_command(command: list[str], *, out: Path, name: str | None, steps: str | None, delay: float | None,
                    duration: float | None, quiet: bool, backend: str) -> None:
    run = record_command(command, out=out, name=name, steps=steps, delay_s=delay, duration_s=duration,
                         backend=backend)
    meta = run.meta
    if quiet:
        print(run.path)
    else:
        steps_done = sum(int(p.get("optimizer_steps") or 0) for p in meta.processes)
        ranks = sorted(p["rank"] for p in meta.processes if p.get("rank") is not None)
        if meta.backend == "nsys":
            who = "under nsys"
        else:
            who = f"ranks {', '.join(map(str, ranks))}" if ranks else f"{len(meta.processes)} process(es)"
            who += f"; {steps_done} optimizer steps"
        print(f"recorded: {' '.join(command)}  (exit {run.exit_code}"
              f"{', interrupted' if meta.interrupted else ''}; {who}; "
              f"{meta.wall_times_s.get('command', 0):.1f} s)")
        for note in meta.notes:
            print(f"tracer: note: {note}", file=sys.stderr)
        if meta.missing_ranks:
            print(f"tracer: warning: rank(s) {', '.join(map(str, meta.missing_ranks))} left no trace",
                  file=sys.stderr)
        print(f"run: {run.path}")
        print(f"next: tracer summary {run.path}   ·   tracer dashboard {run.path.parent}")
        if run.exit_code == 0:
            _print_findings(run.path)
    if run.exit_code:
        raise typer.Exit(run.exit_code)


@app.command(cls=TracerCommand)
def scenarios(
    name: Annotated[str | None, typer.Argument(help="Show one scenario in full.")] = None,
    json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the scenarios `tracer record` runs, with their variants and parameters (CPU / GPU defaults)."""
    from rich import box
    from rich.markdown import Markdown
    from rich.table import Table

    from tracer.scenarios import ScenarioError, all_scenarios, get  # (torch: see the top)

    try:
        chosen = [get(name)] if name else all_scenarios()
    except ScenarioError as exc:
        raise UsageError("", str(exc)) from None
    if json:
        sys.stdout.buffer.write(orjson.dumps([s.describe() for s in chosen], option=orjson.OPT_INDENT_2) + b"\n")
        return
    console = Console()
    for s in chosen:
        console.print(f"[bold]{s.name}[/bold] — {s.description}")
        console.print(f"  variants: {', '.join(s.variants)}", style="dim")
        if name:
            # The details are the scenario module's docstring (reST-style ``code``): render it as Markdown so
            # that it reflows to the terminal instead of showing its markup.
            console.print(Markdown(s.details.strip().replace("``", "`")))
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
        for col in ("param", "CPU default", "GPU default", "meaning"):
            t.add_column(col, no_wrap=col != "meaning", justify="right" if "default" in col else "left")
        for p in s.all_params():
            if not name and p.name in ("variant", "lanes", "seed"):
                continue
            t.add_row(p.name, str(p.cpu), str(p.gpu), p.help)
        console.print(t)
    if not name:
        console.print("Every scenario also takes variant, lanes and seed; `tracer scenarios NAME` shows all. "
                      "Set them with `tracer record NAME --param NAME=VALUE`.", style="dim", markup=False)
