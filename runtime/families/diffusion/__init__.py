"""Diffusion family: a diffusers denoiser (U-Net or transformer) trained on images.

* Model: ``model.path`` is a local diffusers folder (a pipeline folder with ``unet/`` or
  ``transformer/``, ``scheduler/`` and optionally ``text_encoder/``, ``tokenizer/``,
  ``vae/`` — what `export` writes and what Stable Diffusion folders hold), or a built-in
  tiny configuration (``builtin:tiny-unet``, ``builtin:tiny-dit``, ``builtin:tiny-sd3``;
  plain ``builtin`` picks by ``model.flavour``). Built-ins work in pixel space (3 channels,
  no VAE) with a tiny CLIP text encoder and a character-level tokenizer built locally.
* Only the denoiser is "the model": `build_model` returns it, so the trainer prepares,
  shards (FSDP) or partitions (ZeRO-3) nothing else. The text encoder and VAE are frozen
  attributes of the family, built outside DeepSpeed's ``zero.Init``, moved to the
  batch's device, never wrapped.
* Loss: the scheduler decides: noise (epsilon), v-prediction or sample targets for
  DDPM-style schedulers; the velocity ``noise - x0`` for flow matching.
* Data (read by runtime/data_sources/: `images`, `image_sets`, `buckets`): an image folder
  (``*.png|jpg|jpeg|webp``), captions from ``captions.jsonl`` (``{"file", "caption",
  "label"?}``) or a ``.txt`` beside each image, or a `datasets` table; each image trains at
  its own aspect bucket (about ``data.resolution``² pixels), every optimizer step's global
  batch from one bucket (`data_sources.buckets`).
* Cache (`data_sources.latent_cache`, the storage; `cached`, this family's encoders filling
  it): every image's latent and every caption's embedding encoded once before training,
  split across the ranks, kept on disk under content keys; the training step reads them and
  the VAE and text encoder are dropped.
* EMA (`EMA`): shadows of the trainable parameters, kept on CPU by default, one per local
  shard (FSDP2 DTensor shard, ZeRO-3 partition) so it follows the sharding; saved with
  every checkpoint and restored on resume.
* Validation: images generated with `TunerDiffusionPipeline` (a diffusers
  ``DiffusionPipeline``) around the trained, still-sharded denoiser — every rank runs it
  (the sharded forward needs them all), rank 0 writes ``OUTPUT_DIR/validation/step-N/``.

One module per concern: `denoiser` (configurations, the call, noise targets), `cached` (the
latent and text-embedding cache's entries and encoders), `ema`, `conditioning` (frozen text encoder and VAE),
`pipeline` (sampling), `family` (`DiffusionFamily`, what the trainer drives).
"""
