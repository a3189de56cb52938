"""Diffusion data in the forms people keep it (no ranks): Hugging Face imagefolder folders
with metadata.jsonl / metadata.csv, .txt captions, `datasets` sources with an image column
(save_to_disk, parquet), caption dropout, aspect buckets, and refusal of a set whose every
caption is empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tuner.compiler.keys.settings import Settings
from tuner.runtime.data_sources.driver import rank_data
from tuner.runtime.data_sources.image_batches import collate_images
from tuner.runtime.data_sources.image_sets import ImageDataset
from tuner.runtime.families.base import FamilyContext, FamilyError
from tuner.runtime.families.diffusion.family import DiffusionFamily

CAPTIONS = ["a red square", "a blue circle", "a green triangle", "a yellow star"]
SIZES = [(48, 32), (32, 32), (32, 48), (48, 32)]  # landscape, square, portrait, landscape


def _sets(fam):
    """(train, validation) as the ranks get them: the data driver's."""
    data = rank_data(fam)
    return data.train, data.val


def _collate(fam, samples):
    """A batch as the ranks' loader makes it."""
    return collate_images(samples, tokenize=fam.data_recipe().tokenize)


def _images(folder: Path) -> list[str]:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, size in enumerate(SIZES):
        name = f"img{i}.png"
        Image.new("RGB", size, (60 * i, 255 - 60 * i, 128)).save(folder / name)
        names.append(name)
    return names


def _family(tmp_path: Path, **data) -> DiffusionFamily:
    s = Settings.from_dict({"model": {"family": "diffusion", "path": "builtin:tiny-unet"},
                            "data": {"validation_split": 0.0, "resolution": 32, "cache_latents": False,
                                                      **data}})
    return DiffusionFamily(FamilyContext(settings=s, base_dir=tmp_path))


def _captions(ds: ImageDataset) -> list[str]:
    return [r["caption"] for r in ds.rows]


def test_imagefolder_metadata_jsonl_gives_captions_and_buckets(tmp_path):
    folder = tmp_path / "train"
    names = _images(folder)
    (folder / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": n, "text": c}) + "\n" for n, c in zip(names, CAPTIONS)))
    fam = _family(tmp_path, path="train")
    train, val = _sets(fam)
    assert val is None
    assert _captions(train) == CAPTIONS
    buckets = train.buckets
    shapes = [("wide" if buckets[b][0] > buckets[b][1] else "tall" if buckets[b][0] < buckets[b][1] else "square")
              for b in train.bucket_of]
    assert shapes == ["wide", "square", "tall", "wide"]
    assert train.bucket_of[0] == train.bucket_of[3]
    batch = _collate(fam, [train[0], train[3]])
    w, h = buckets[train.bucket_of[0]]
    assert tuple(batch["pixel_values"].shape) == (2, 3, h, w)
    assert batch["input_ids"].shape[0] == 2


def test_metadata_csv_in_a_subfolder_with_a_named_caption_column(tmp_path):
    sub = tmp_path / "data" / "part1"
    names = _images(sub)
    lines = ["file_name,prompt_en,label"] + [f"{n},{c},{i}" for i, (n, c) in enumerate(zip(names, CAPTIONS))]
    (sub / "metadata.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(FamilyError, match=r"no caption column .*prompt_en.*data\.caption_column"):
        _sets(_family(tmp_path, path="data"))
    train, _ = _sets(_family(tmp_path, path="data", caption_column="prompt_en"))
    assert _captions(train) == CAPTIONS
    assert [r["label"] for r in train.rows] == [0, 1, 2, 3]


def test_txt_captions_beside_images(tmp_path):
    names = _images(tmp_path / "imgs")
    for n, c in zip(names, CAPTIONS):
        (tmp_path / "imgs" / n).with_suffix(".txt").write_text(c + "\n")
    train, _ = _sets(_family(tmp_path, path="imgs"))
    assert _captions(train) == CAPTIONS


def test_every_caption_empty_is_refused_unless_dropped_on_purpose(tmp_path, capsys):
    _images(tmp_path / "imgs")
    with pytest.raises(FamilyError, match=r"every image in .*imgs has an empty caption.*data\.caption_dropout = 1\.0"):
        _sets(_family(tmp_path, path="imgs"))
    train, _ = _sets(_family(tmp_path, path="imgs", caption_dropout=1.0))
    assert len(train) == 4
    # some captions missing: trained, with a warning naming how many
    (tmp_path / "imgs" / "img0.txt").write_text("a red square")
    _sets(_family(tmp_path, path="imgs"))
    assert "3 of 4 images" in capsys.readouterr().err


def _hf_dataset(tmp_path: Path):
    import datasets

    names = _images(tmp_path / "raw")
    return datasets.Dataset.from_dict(
        {"picture": [str(tmp_path / "raw" / n) for n in names], "caption": CAPTIONS},
        features=datasets.Features({"picture": datasets.Image(), "caption": datasets.Value("string")}))


def test_save_to_disk_folder_with_an_image_feature(tmp_path):
    ds = _hf_dataset(tmp_path)
    ds.save_to_disk(str(tmp_path / "saved"))
    before = sorted(p.name for p in (tmp_path / "saved").iterdir())
    fam = _family(tmp_path, path="saved")
    train, _ = _sets(fam)
    assert _captions(train) == CAPTIONS
    assert train.buckets[train.bucket_of[2]][1] > train.buckets[train.bucket_of[2]][0]  # the portrait one
    batch = _collate(fam, [train[1], train[1]])
    assert batch["pixel_values"].shape[0] == 2 and batch["pixel_values"].abs().max() <= 1.0
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == before  # nothing written into the data


def test_parquet_file_with_image_bytes_and_a_named_image_column(tmp_path):
    ds = _hf_dataset(tmp_path)
    ds.to_parquet(str(tmp_path / "train.parquet"))
    train, _ = _sets(_family(tmp_path, path="train.parquet"))
    assert _captions(train) == CAPTIONS
    with pytest.raises(FamilyError, match=r"no image column 'photo' \(data\.image_column\).*picture"):
        _sets(_family(tmp_path, path="train.parquet", image_column="photo"))


def test_caption_dropout_empties_that_share_of_training_captions_only(tmp_path):
    folder = tmp_path / "train"
    names = _images(folder)
    (folder / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": n, "text": c}) + "\n" for n, c in zip(names, CAPTIONS)))
    train, val = _sets(_family(tmp_path, path="train", caption_dropout=0.5, validation_split=0.25))
    drawn = [train[i % len(train)]["caption"] for i in range(400)]
    dropped = drawn.count("")
    assert 120 < dropped < 280, dropped
    assert all(val[i]["caption"] for i in range(len(val)))  # validation keeps its captions
    train0, _ = _sets(_family(tmp_path, path="train"))
    assert all(train0[i % 4]["caption"] for i in range(40))


def _captioned_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "imgs"
    for n, c in zip(_images(folder), CAPTIONS):
        (folder / n).with_suffix(".txt").write_text(c + "\n")
    return folder


def test_the_launcher_reads_every_images_bucket_and_names_a_file_that_is_no_image(tmp_path):
    """`tuner run`'s data check (before any rank) opens every image as the ranks will: it says
    what it found, and a file that is no image is a DataError naming it and the fix, not a
    traceback on every rank (it was: PIL's UnidentifiedImageError from each rank)."""
    from tuner.runtime.data_sources.driver import check_data

    folder = _captioned_folder(tmp_path)
    assert check_data(_family(tmp_path, path="imgs")) == "data: imgs: 4 images in 3 aspect bucket(s), 0 held out"
    (folder / "notes.png").write_text("not a png")
    (folder / "notes.txt").write_text("a caption\n")
    with pytest.raises(FamilyError) as raised:
        check_data(_family(tmp_path, path="imgs"))
    assert raised.value.exit_code == 2
    assert str(raised.value).startswith(f"{folder / 'notes.png'}: not an image that can be read (UnidentifiedImageError")
    assert "replace the file with a readable PNG, JPEG or WebP, or remove it" in str(raised.value)


def test_tuner_run_refuses_a_folder_with_a_file_that_is_no_image_before_any_rank_starts(tmp_path):
    from tests.reliability.rel_helpers import assert_honest, refused_before_launch

    folder = _captioned_folder(tmp_path)
    (folder / "img1.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    (tmp_path / "settings.toml").write_text(
        '[model]\nfamily = "diffusion"\npath = "builtin:tiny-unet"\n[data]\npath = "imgs"\nresolution = 32\n'
        'validation_split = 0.0\n[hardware]\nplatform = "cpu"\nnum_processes = 2\n[training]\nmax_steps = 2\n')
    p = refused_before_launch("run", tmp_path / "settings.toml", cwd=tmp_path)
    assert_honest(p.returncode, p.stdout, p.stderr)
    assert p.returncode == 2 and f"{folder / 'img1.png'}: not an image that can be read" in p.stderr, p.stderr


def test_a_damaged_image_whose_header_reads_is_named_when_its_batch_is_loaded(tmp_path):
    """A truncated file passes the header read (the launcher's check); decoding it for a batch
    on a rank is then the DataError naming it (exit 2 on the rank, no traceback)."""
    folder = _captioned_folder(tmp_path)
    whole = (folder / "img0.png").read_bytes()
    (folder / "img0.png").write_bytes(whole[: len(whole) // 2])
    fam = _family(tmp_path, path="imgs")
    train, _ = _sets(fam)
    with pytest.raises(FamilyError, match=r"img0\.png: not an image that can be read \(OSError: .*truncated"):
        _collate(fam, [train[0]])
