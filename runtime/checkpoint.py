"""Checkpoint layout, discovery and compatibility: small pure functions (no torch).

Layout under OUTPUT_DIR/checkpoints/::

    step-10/                 a complete checkpoint (accelerate's save_state output +
        tuner_checkpoint.json   this file, written last, before the rename)
    step-20/
    latest                   text file naming the newest complete checkpoint ("step-20")
    .tmp-step-30/            a save in progress (or one killed mid-way): never read

A save writes into ``.tmp-step-N``; after every rank has finished, rank 0 writes
`tuner_checkpoint.json`, renames the folder to ``step-N`` (atomic on one file system) and
only then replaces ``latest`` (write-to-temp + ``os.replace``). A checkpoint is therefore
complete or absent, and ``latest`` never names a partial one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from ..compiler.keys.choices import StateDictType
from ..compiler.plan.strategy import Strategy
from .artefacts import RunError

META = "tuner_checkpoint.json"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d+)$")
TMP_PREFIX = ".tmp-"

#: What a checkpoint holds, its record's ``state_dict_type``: a wider vocabulary than the setting
#: of that name (`StateDictType`, FSDP's ``sharded`` or ``full``, spelt the same), adding
#: ``deepspeed`` (ZeRO's own files) and ``universal`` (DeepSpeed's universal checkpoint,
#: `checkpoint_convert.py`). DDP and one-process runs hold ``full`` tensors. Every version of
#: tuner has written these words; a record with another is damaged (`meta_problem`).
HeldState = Literal[StateDictType, "deepspeed", "universal"]


@dataclass
class CheckpointMeta:
    step: int
    strategy: Strategy
    """The plan's strategy: ddp, single, fsdp1, fsdp2, zero1..zero3 (the JSON holds its string)."""
    state_dict_type: HeldState
    """sharded or full (FSDP); 'full' for DDP; 'deepspeed' for ZeRO; 'universal' once converted."""
    world_size: int
    epoch: int = 0
    batches_in_epoch: int = 0
    """Micro-batches of the current epoch already consumed (the data position)."""
    tokens_seen: int = 0
    micro_batch_size: int = 0
    gradient_accumulation_steps: int = 0
    """With world_size, the layout the data position counts in (0: not recorded; resume_rules.py)."""
    family: str = "causal_lm"
    manifest: dict[str, Any] = field(default_factory=dict)
    """The run's manifest, so a checkpoint can be exported on its own."""
    files: dict[str, int] = field(default_factory=dict)
    """Every file of the checkpoint rank 0 saw when it was published -> its size in bytes, so a
    truncated state file is found before any rank starts (not by a rank failing to load it)."""

    def __post_init__(self) -> None:
        self.strategy = Strategy(self.strategy)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def checkpoints_dir(output_dir: Path) -> Path:
    return Path(output_dir) / "checkpoints"


def step_dir_name(step: int) -> str:
    return f"step-{step}"


_META_TYPES = {"step": int, "strategy": str, "state_dict_type": str, "world_size": int, "epoch": int,
               "batches_in_epoch": int, "tokens_seen": int, "micro_batch_size": int,
               "gradient_accumulation_steps": int, "family": str, "manifest": dict, "files": dict}
_META_REQUIRED = ("step", "strategy", "state_dict_type", "world_size")


def meta_problem(ckpt: Path) -> str | None:
    """Why `ckpt` is not an intact checkpoint, or None. Checks what can be checked without
    loading tensors: the folder, its `tuner_checkpoint.json` (complete, every field of the
    right type) and that the model state files it must hold exist and are not empty."""
    from ..compiler.read.files import FileError, load_json

    ckpt = Path(ckpt)
    if not ckpt.is_dir():
        return "the folder is missing"
    try:
        data = load_json(ckpt / META, "checkpoint record")
    except FileError as exc:
        return f"no {META}" if exc.missing else exc.message
    if not isinstance(data, dict):
        return f"{META} is not a JSON object"
    for key, kind in _META_TYPES.items():
        if key not in data:
            if key in _META_REQUIRED:
                return f"{META}: {key} is missing"
            continue
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, int) and value < (key == "world_size")):
            return f"{META}: {key} is {value!r}"
    if set(data) - set(_META_TYPES):
        return f"{META}: unknown keys {', '.join(sorted(set(data) - set(_META_TYPES)))}"
    named = _STEP_DIR.match(ckpt.name)
    if named and int(named.group(1)) != data["step"]:  # a folder copied or renamed by hand
        return f"the folder is named {ckpt.name} but its {META} records step {data['step']}"
    if data["strategy"] not in set(Strategy):
        return f"{META}: strategy is {data['strategy']!r}, not one of {', '.join(Strategy)}"
    if data["state_dict_type"] not in get_args(HeldState):
        return f"{META}: state_dict_type is {data['state_dict_type']!r}, not one of {', '.join(get_args(HeldState))}"
    return _state_problem(ckpt, Strategy(data["strategy"])) or _size_problem(ckpt, data.get("files", {}))


def _size_problem(ckpt: Path, files: dict[str, Any]) -> str | None:
    """A recorded file that is now a different size (truncated by a full disk or a copy cut
    short). A recorded file that is absent is not judged here: on machines without a shared
    file system each holds only its own ranks' files (`_state_problem` checks what must be)."""
    for rel, size in sorted(files.items()):
        path = ckpt / rel
        if not isinstance(size, int) or ".." in Path(rel).parts:
            return f"{META}: files[{rel!r}] is {size!r}"
        if path.is_file() and path.stat().st_size != size:
            return f"{rel} is {path.stat().st_size} bytes; it had {size} when the checkpoint was saved (truncated?)"
    return None


def file_sizes(folder: Path) -> dict[str, int]:
    """Relative path -> size of every file below `folder` (the checkpoint's record excepted)."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != META}


def _state_problem(ckpt: Path, strategy: Strategy) -> str | None:
    """The model state files a checkpoint of `strategy` holds: present and not empty."""
    def nonempty(pattern: str) -> bool:
        return any(p.is_file() and p.stat().st_size > 0 for p in ckpt.glob(pattern))

    if strategy.is_deepspeed:
        ok, what = nonempty("**/*model_states.pt"), "DeepSpeed model states (*model_states.pt)"
    elif (ckpt / "pytorch_model_fsdp_0").is_dir():
        ok = nonempty("pytorch_model_fsdp_0/.metadata") and nonempty("pytorch_model_fsdp_0/*.distcp")
        what = "the sharded model (pytorch_model_fsdp_0/.metadata and *.distcp)"
    else:
        ok = any(nonempty(n) for n in ("pytorch_model_fsdp.bin", "pytorch_model_fsdp_0.bin", "model.safetensors",
                                       "pytorch_model.bin", "model*.safetensors"))
        what = "the model state (model.safetensors or pytorch_model_fsdp.bin)"
    return None if ok else f"{what} missing or empty"


def read_meta(ckpt: Path, action: str = "resume") -> CheckpointMeta:
    """The record of an intact checkpoint; RunError for an incomplete or damaged one (naming
    the last intact one and how to `action` it: ``resume`` or ``export``)."""
    p = Path(ckpt) / META
    if not p.is_file():
        raise RunError(f"{ckpt} is not a complete tuner checkpoint (no {META})")
    problem = meta_problem(ckpt)
    if problem:
        raise RunError(f"checkpoint {ckpt} is damaged: {problem}{intact_hint(Path(ckpt), action)}")
    from ..compiler.read.files import load_json

    return CheckpointMeta(**load_json(p, "checkpoint record"))


def intact_hint(damaged: Path, action: str = "resume") -> str:
    """'; the last intact one is X: <how to use it>' for a damaged checkpoint, `action`
    being ``resume`` (`tuner run`) or ``export`` (`tuner checkpoint export`)."""
    intact = last_intact(damaged.parent, exclude=damaged)
    if intact is None:
        return "; no intact checkpoint remains" + (": start without --resume" if action == "resume" else "")
    use = (f"resume from it with `tuner run BUILD_DIR --resume {intact}`" if action == "resume"
           else f"export it with `tuner checkpoint export {intact} --out DIR`")
    return f"; the last intact one is {intact}: {use}"


def last_intact(ckdir: Path, exclude: Path | None = None) -> Path | None:
    """The newest checkpoint in `ckdir` that `meta_problem` finds nothing wrong with."""
    for _, path in reversed(complete_checkpoints(ckdir)):
        if exclude is not None and os.path.realpath(path) == os.path.realpath(exclude):  # never raises on a loop
            continue
        if meta_problem(path) is None:
            return path
    return None


def complete_checkpoints(ckdir: Path) -> list[tuple[int, Path]]:
    """(step, path) of complete checkpoints, oldest first."""
    if not ckdir.is_dir():
        return []
    out = []
    for child in ckdir.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and child.is_dir() and (child / META).is_file():
            out.append((int(m.group(1)), child))
    return sorted(out)


def latest_checkpoint(ckdir: Path) -> Path | None:
    """The checkpoint `latest` names, if it is complete; else the newest complete one."""
    pointer = ckdir / LATEST
    if pointer.is_file():
        name = pointer.read_text(encoding="utf-8").strip()
        cand = ckdir / name
        if _STEP_DIR.match(name) and (cand / META).is_file():
            return cand
    done = complete_checkpoints(ckdir)
    return done[-1][1] if done else None


def latest_intact(ckdir: Path, action: str = "resume") -> Path | None:
    """The latest checkpoint, refusing a damaged one (RunError naming the last intact one
    and the ``--resume PATH`` that uses it): what `--resume latest` and export use. None
    when there is no checkpoint at all."""
    pointer = ckdir / LATEST
    named = None
    refuse_link_loop(pointer, "checkpoint pointer", hint=intact_hint(pointer, action))
    if pointer.is_symlink() or pointer.exists() and not pointer.is_file():
        raise RunError(f"{pointer} is not tuner's pointer file (it is a "
                       f"{'symbolic link' if pointer.is_symlink() else 'directory' if pointer.is_dir() else 'special file'}); "
                       f"tuner does not remove it: move it away, or resume a checkpoint by path "
                       f"(--resume {ckdir}/step-N){intact_hint(pointer)}")
    if pointer.is_file():
        from ..compiler.read.files import FileError, read_text

        try:
            name = read_text(pointer, "checkpoint pointer", 4096).strip()
        except FileError:
            name = ""
        named = ckdir / name if _STEP_DIR.match(name) else None
        if named is not None:
            refuse_link_loop(named, "checkpoint", hint=intact_hint(named, action))
    done = complete_checkpoints(ckdir)
    newest = named if named is not None else (done[-1][1] if done else None)
    if newest is None:
        if pointer.is_file():  # `latest` exists but names nothing usable
            raise RunError(f"{pointer} does not name a checkpoint{intact_hint(ckdir / LATEST)}")
        return None
    problem = meta_problem(newest)
    if problem:
        raise RunError(f"the latest checkpoint {newest} is damaged ({problem}){intact_hint(newest, action)}")
    return newest


def is_link_loop(path: Path) -> bool:
    """A symbolic link that never reaches a file (it points at itself, or round a circle)."""
    import errno

    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def refuse_link_loop(path: Path, what: str, hint: str = "") -> None:
    """RunError naming `path` when it is a symbolic-link loop (found before anything follows
    it: pathlib raises a RuntimeError for a loop, and `is_dir()` calls it merely missing)."""
    if is_link_loop(Path(path)):
        raise RunError(f"{what} {path} is a symbolic link that points back at itself (a loop); tuner does not "
                       f"follow or remove it: remove or fix the link{hint}")


def resolve_resume(resume: str, output_dir: Path) -> Path | None:
    """'' -> None; 'latest' -> the latest checkpoint (None when there is none yet; an error
    naming the last intact one when it is damaged); a path -> that checkpoint (error when it
    is not an intact one)."""
    if not resume:
        return None
    if resume in ("latest", "auto"):  # `tuner run` has applied the output-directory rule to "auto"
        return latest_intact(checkpoints_dir(output_dir))
    p = Path(resume).expanduser()
    refuse_link_loop(p, "checkpoint", hint=intact_hint(p) if p.parent.is_dir() else "")
    if not p.is_dir():
        raise RunError(f"checkpoint not found: {p}")
    read_meta(p)
    return p


def state_dict_kind(strategy: Strategy, state_dict_type: HeldState) -> HeldState:
    """What a checkpoint of this strategy holds: 'deepspeed', FSDP's 'sharded'/'full', or
    'full' (DDP and single-process runs keep whole tensors)."""
    if strategy.is_deepspeed:
        return "deepspeed"
    return state_dict_type if strategy.is_fsdp else "full"


def tmp_dir_for(ckdir: Path, step: int) -> Path:
    return ckdir / f"{TMP_PREFIX}{step_dir_name(step)}"


def remove_partial(ckdir: Path) -> list[Path]:
    """Remove folders of saves that never completed (a run killed mid-save): only tuner's
    own names (``.tmp-step-N``), never through a symbolic link."""
    gone = []
    if ckdir.is_dir():
        for child in ckdir.iterdir():
            if re.fullmatch(r"\.tmp-step-\d+", child.name) and child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
                gone.append(child)
    return gone


def publish(ckdir: Path, tmp: Path, meta: CheckpointMeta) -> Path:
    """Rank 0, after every rank finished writing into `tmp`: meta, rename, move `latest`."""
    from ..compiler.read.files import give_new_file_modes

    give_new_file_modes(tmp)  # libraries write some files through private temporaries (0600)
    meta.files = file_sizes(tmp)
    (tmp / META).write_text(meta.to_json(), encoding="utf-8")
    final = ckdir / step_dir_name(meta.step)
    if final.is_symlink() or final.exists() and not (final / META).is_file():
        raise RunError(f"{final} is in the way of the checkpoint of step {meta.step} and tuner did not write it; "
                       f"the checkpoint stays in {tmp}: move {final} away, then resume with --resume {tmp}")
    if final.exists():  # tuner's checkpoint of the same step (a resume from an earlier one)
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_latest(ckdir, final.name)
    return final


def write_latest(ckdir: Path, name: str) -> None:
    from ..compiler.read.files import write_atomic

    write_atomic(ckdir / LATEST, name + "\n")


def prune(ckdir: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints (never the one `latest` names)."""
    if keep_last <= 0:
        return []
    keep_pointer = latest_checkpoint(ckdir)
    done = complete_checkpoints(ckdir)
    gone = []
    for _, path in done[:-keep_last]:
        if path != keep_pointer:
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def check_step(meta: CheckpointMeta, total_steps: int, ckpt: Path) -> None:
    """Refuse a checkpoint whose step lies past the run's last step (an edited record, or
    a --max-steps below the step it reached)."""
    if meta.step > total_steps:
        raise RunError(f"checkpoint {ckpt} is at step {meta.step}, past this run's last step {total_steps}; "
                       f"resume it with a larger training.max_steps (or --max-steps), or resume an earlier "
                       f"checkpoint{intact_hint(ckpt)}")


def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a truncated, garbled, empty or missing state file raises, library by library."""
    import pickle

    errors: list[type[BaseException]] = [OSError, EOFError, RuntimeError, ValueError, KeyError, IndexError,
                                         TypeError, AssertionError, pickle.UnpicklingError]
    try:  # torch.distributed.checkpoint's error derives from BaseException, not Exception
        from torch.distributed.checkpoint.api import CheckpointException

        errors.append(CheckpointException)
    except ImportError:
        pass
    try:
        from safetensors import SafetensorError

        errors.append(SafetensorError)
    except ImportError:
        pass
    return tuple(errors)


def unreadable(path: Path, exc: BaseException, action: str = "resume") -> RunError:
    """A checkpoint whose state files cannot be read: one message, naming the last intact one."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if any(line.startswith("Traceback") for line in lines):  # DCP's error embeds each rank's traceback
        lines = lines[-1:]  # its last line is the root cause ("FileNotFoundError: ...")
    text = " ".join(" ".join(lines).split())[:300] or type(exc).__name__
    return RunError(f"checkpoint {path} is damaged: its state cannot be read ({type(exc).__name__}: {text})"
                    f"{intact_hint(Path(path), action)}")
