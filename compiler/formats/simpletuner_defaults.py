"""SimpleTuner's own values for what a config leaves unset, read from its code.

Every value cites where SimpleTuner sets it, in bghira/SimpleTuner at commit
bc8e6ab7738ce457a2ed8eb2d26cadd91c6442cb. Its argument parser (`get_argument_parser`,
simpletuner/helpers/configuration/cmd_args.py lines 472-555) is built from the WebUI's field
registry, so the command line, the JSON/TOML configs and the WebUI's saved files share these
defaults: each ``default_value=`` line in simpletuner/simpletuner_sdk/server/services/field_registry/
sections/ (cited below as ``field_registry/sections/FILE:LINE``).
"""

from __future__ import annotations

from typing import Any

from ..keys import paths as K

SECTIONS = "simpletuner/simpletuner_sdk/server/services/field_registry/sections/"
OPTIMIZERS = "simpletuner/helpers/training/optimizer_param.py"

#: (tuner key, SimpleTuner key, SimpleTuner's value for it when unset, where SimpleTuner sets it)
DEFAULTS: tuple[tuple[str, str, Any, str], ...] = (
    (K.MODEL_TYPE, "model_type", "full", "field_registry/sections/model.py:203"),
    (K.TRAINING_MIXED_PRECISION, "mixed_precision", "bf16", "field_registry/sections/advanced.py:689"),
    (K.TRAINING_OPTIMIZER, "optimizer", "adamw_bf16", "field_registry/sections/training.py:114"),
    (K.TRAINING_LEARNING_RATE, "learning_rate", 4e-7, "field_registry/sections/training.py:89"),
    (K.TRAINING_LR_SCHEDULER, "lr_scheduler", "constant_with_warmup", "field_registry/sections/training.py:147"),
    (K.TRAINING_WARMUP_STEPS, "lr_warmup_steps", 0, "field_registry/sections/training.py:186"),
    (K.TRAINING_MICRO_BATCH_SIZE, "train_batch_size", 4, "field_registry/sections/training.py:67"),
    (K.TRAINING_GRADIENT_ACCUMULATION_STEPS, "gradient_accumulation_steps", 1, "field_registry/sections/memory.py:24"),
    (K.TRAINING_NUM_EPOCHS, "num_train_epochs", 1, "field_registry/sections/training.py:26"),
    (K.TRAINING_MAX_STEPS, "max_train_steps", 0, "field_registry/sections/training.py:48 (None: the epochs decide)"),
    (K.TRAINING_GRADIENT_CHECKPOINTING, "gradient_checkpointing", True, "field_registry/sections/training.py:224"),
    (K.TRAINING_EMA, "use_ema", False, "field_registry/sections/training.py:826"),
    (K.TRAINING_EMA_DECAY, "ema_decay", 0.995, "field_registry/sections/training.py:928"),
    (K.TRAINING_EMA_DEVICE, "ema_device", "cpu", "field_registry/sections/training.py:845"),
    (K.CHECKPOINT_KEEP_LAST, "checkpoints_total_limit", 5, "field_registry/sections/training.py:204"),
    (K.CHECKPOINT_EVERY_STEPS, "checkpoint_step_interval", 500, "field_registry/sections/logging_fields.py:79"),
    (K.OUTPUT_DIR, "output_dir", "simpletuner-results", "field_registry/sections/model.py:148"),
    (K.DATA_RESOLUTION, "resolution", 1024, "field_registry/sections/data.py:26"),
    (K.DATA_CAPTION_DROPOUT, "caption_dropout_probability", 0.1, "field_registry/sections/advanced.py:1189"),
    (K.LOGGING_PROJECT, "tracker_project_name", "simpletuner", "field_registry/sections/logging_fields.py:230"),
    (K.LOGGING_DIR, "logging_dir", "logs", "field_registry/sections/logging_fields.py:272"),
)
#: Only for model_type = "lora" (lora_alpha unset is the rank: simpletuner/helpers/models/common.py:1092).
LORA_DEFAULTS: tuple[tuple[str, str, Any, str], ...] = (
    (K.MODEL_LORA_RANK, "lora_rank", 16,
     "field_registry/sections/lora.py:25; the WebUI's too, server/services/field_service.py:2143"),
    (K.MODEL_LORA_DROPOUT, "lora_dropout", 0.1, "field_registry/sections/lora.py:137"),
)
#: Only for lr_scheduler = "polynomial" (transformers' get_polynomial_decay_schedule_with_warmup with
#: SimpleTuner's lr_end and lr_power: simpletuner/helpers/training/custom_schedule.py:535-544).
POLYNOMIAL_DEFAULTS: tuple[tuple[str, str, Any, str], ...] = (
    (K.TRAINING_LR_END, "lr_end", 4e-7, "field_registry/sections/advanced.py:921"),
    (K.TRAINING_LR_POWER, "lr_power", 0.8, "field_registry/sections/training.py:787"),
)
#: Only with fsdp_enable (the same as tuner's FSDP2 defaults, written out).
FSDP_DEFAULTS: tuple[tuple[str, str, Any, str], ...] = (
    (K.FSDP_VERSION, "fsdp_version", 2, "field_registry/sections/advanced.py:1684"),
    (K.FSDP_RESHARD_AFTER_FORWARD, "fsdp_reshard_after_forward", True, "field_registry/sections/advanced.py:1705"),
    (K.CHECKPOINT_STATE_DICT_TYPE, "fsdp_state_dict_type", "sharded", "field_registry/sections/advanced.py:1722"),
    (K.FSDP_CPU_RAM_EFFICIENT_LOADING, "fsdp_cpu_ram_efficient_loading", False, "field_registry/sections/advanced.py:1743"),
    (K.FSDP_AUTO_WRAP_POLICY, "fsdp_auto_wrap_policy", "transformer", "field_registry/sections/advanced.py:1760"),
    (K.FSDP_OFFLOAD_PARAMS, "fsdp_cpu_offload", False, "field_registry/sections/advanced.py:1799"),
    (K.FSDP_ACTIVATION_CHECKPOINTING, "fsdp_activation_checkpointing", False, "field_registry/sections/advanced.py:1816"),
)
#: Without DeepSpeed, SimpleTuner's optimizer takes its weight decay from the optimizer's own
#: ``default_settings`` (then ``optimizer_config``), not from ``adam_weight_decay``
#: (optimizer_param.py:912-925): optimizer -> (weight decay, line of optimizer_param.py).
OPTIMIZER_WEIGHT_DECAY: dict[str, tuple[float, int]] = {
    "adamw_bf16": (0.01, 195), "ao-adamw8bit": (0.01, 210), "ao-adamw4bit": (0.01, 220),
    "adamw_schedulefree": (0.01, 257), "optimi-stableadamw": (0.01, 306), "optimi-adamw": (0.0, 320),
    "optimi-lion": (0.0, 331), "bnb-adamw": (0.01, 584), "bnb-adamw8bit": (0.01, 593), "bnb-lion": (0.0, 620),
    "bnb-lion8bit": (0.0, 629), "prodigy": (0.0, 737), "torch-adam": (0.0, 81), "torch-adamw": (0.01, 91),
    "torch-sgd": (0.0, 101),
}
#: With DeepSpeed's optimizer SimpleTuner passes adam_weight_decay (simpletuner/helpers/training/trainer.py:4139).
ADAM_WEIGHT_DECAY = (0.01, "field_registry/sections/optimizer.py:176")
#: lr_scheduler values that are SimpleTuner's own restarting schedules, period lr_warmup_steps x processes
#: (custom_schedule.py:495-532; "cosine_with_warmup" is "cosine", cli_utils.py:53-57): transformers'
#: schedules of the same name decay once over the run instead.
OWN_SCHEDULES = ("cosine", "sine", "cosine_with_restarts", "cosine_with_warmup")

#: SimpleTuner's keys that change what it trains, by their registry section (field_registry/sections/):
#: one not mapped to a tuner setting is named in its own note, never in the catch-all list.
TRAINING_SECTIONS: dict[str, str] = {
    "architecture": """
        control controlnet controlnet_custom_config diffusion_blocks_config max_grounding_entities
        prediction_type pretrained_grounding_model_name_or_path rescale_betas_zero_snr tread_config
    """,
    "distillation": """
        distillation_config distillation_method
    """,
    "lora_config": """
        assistant_lora_inference_strength assistant_lora_path assistant_lora_strength disable_assistant_lora
        init_lokr_norm init_lora init_lora_ema init_lora_step lora_alpha lora_dropout lora_format
        lora_init_type lora_rank lora_type lycoris_config peft_lora_mode peft_lora_target_modules
        singlora_ramp_up_steps slider_lora_target use_dora
    """,
    "model_config": """
        controlnet_model_name_or_path delete_model_after_load model_family model_flavour model_type
        pretrained_gemma_model_name_or_path pretrained_model_name_or_path pretrained_t5_model_name_or_path
        pretrained_transformer_model_name_or_path pretrained_transformer_subfolder
        pretrained_unet_model_name_or_path pretrained_unet_subfolder pretrained_vae_model_name_or_path
        qwen_text_encoder_model_name_or_path revision trust_remote_code variant
    """,
    "model_specific": """
        framerate refiner_training refiner_training_invert_schedule refiner_training_strength
    """,
    "quantization": """
        base_model_default_dtype base_model_precision quantization_config quantize_activations quantize_via
        sdnq_compile_mode sdnq_dequantize_fp32 sdnq_group_size sdnq_hadamard_group_size
        sdnq_modules_dtype_dict sdnq_modules_quant_config sdnq_modules_to_not_convert
        sdnq_modules_to_not_use_matmul sdnq_quantized_matmul_dtype sdnq_svd_rank sdnq_svd_steps
        sdnq_use_hadamard sdnq_use_quantized_matmul sdnq_use_static_quantization
        sdnq_use_stochastic_rounding sdnq_use_svd sdnq_weights_dtype text_encoder_1_precision
        text_encoder_2_precision text_encoder_3_precision text_encoder_4_precision
    """,
    "ema_config": """
        ema_cpu_only ema_decay ema_device ema_foreach_disable ema_update_interval ema_warmup_steps use_ema
    """,
    "optimizer_config": """
        adam_beta1 adam_beta2 adam_epsilon adam_weight_decay fuse_optimizer grad_clip_method
        gradient_precision max_grad_norm optimizer optimizer_beta1 optimizer_beta2 optimizer_config
        optimizer_cpu_offload_method optimizer_offload_gradients optimizer_release_gradients prodigy_steps
    """,
    "learning_rate": """
        learning_rate lr_end lr_num_cycles lr_power lr_scale lr_scale_sqrt lr_scheduler lr_warmup_steps
    """,
    "training_schedule": """
        disable_segmented_timestep_sampling gradient_accumulation_steps max_train_steps num_train_epochs
        strict_epoch_limit timestep_bias_begin timestep_bias_end timestep_bias_multiplier
        timestep_bias_portion timestep_bias_strategy training_scheduler_timestep_spacing
    """,
    "loss_functions": """
        audio_flow_schedule_shift crepa_adjacent_distance crepa_adjacent_tau crepa_block_index
        crepa_cutoff_step crepa_decay_steps crepa_drop_vae_encoder crepa_enabled crepa_encoder
        crepa_encoder_frames_batch_size crepa_encoder_image_size crepa_feature_source crepa_lambda
        crepa_lambda_end crepa_normalize_by_frames crepa_normalize_neighbour_sum crepa_power crepa_scheduler
        crepa_self_flow crepa_self_flow_mask_ratio crepa_similarity_ema_decay crepa_similarity_threshold
        crepa_spatial_align crepa_teacher_block_index crepa_threshold_mode crepa_use_backbone_features
        crepa_use_tae crepa_warmup_steps diff2flow_enabled diff2flow_loss flow_beta_schedule_alpha
        flow_beta_schedule_beta flow_cubic_schedule_weights flow_custom_timesteps flow_schedule_auto_shift
        flow_schedule_shift flow_sigmoid_scale flow_timesteps_mode flow_use_beta_schedule
        flow_use_uniform_schedule huber_c huber_schedule internal_guidance_block_index
        internal_guidance_enabled internal_guidance_loss_weight irepa_enabled irepa_projector_kernel_size
        irepa_spatial_norm_alpha layersync_enabled layersync_lambda layersync_student_block
        layersync_teacher_block loss_type masked_loss_probability mixflow_enabled mixflow_gamma
        nextlat_block_index nextlat_enabled nextlat_kl_weight nextlat_state_loss nextlat_weight
        scheduled_sampling_max_step_offset scheduled_sampling_order scheduled_sampling_prob_end
        scheduled_sampling_prob_start scheduled_sampling_probability scheduled_sampling_ramp_shape
        scheduled_sampling_ramp_steps scheduled_sampling_reflexflow scheduled_sampling_reflexflow_alpha
        scheduled_sampling_reflexflow_beta1 scheduled_sampling_reflexflow_beta2 scheduled_sampling_sampler
        scheduled_sampling_start_step scheduled_sampling_strategy snr_gamma snr_weight
        soft_min_snr_sigma_data twinflow_enabled twinflow_target_step_count urepa_cutoff_step
        urepa_decay_steps urepa_enabled urepa_encoder_image_size urepa_lambda urepa_lambda_end
        urepa_manifold_weight urepa_model urepa_power urepa_scheduler urepa_similarity_ema_decay
        urepa_similarity_threshold urepa_threshold_mode urepa_use_tae urepa_warmup_steps use_soft_min_snr
        validation_internal_guidance_scale xm_block_size xm_candidate_count xm_enabled xm_selection_scope
        xm_training_target
    """,
    "noise_settings": """
        input_perturbation input_perturbation_steps noise_offset noise_offset_probability offset_noise
    """,
    "text_encoder": """
        freeze_encoder_after freeze_encoder_before freeze_encoder_strategy fully_unload_text_encoder
        layer_freeze_strategy save_text_encoder t5_padding text_encoder_limit text_encoder_lr
        train_text_encoder
    """,
    "checkpointing": """
        checkpoint_epoch_interval checkpoint_step_interval checkpointing_rolling_steps
        checkpointing_use_tempdir checkpoints_rolling_total_limit checkpoints_total_limit
        delete_invalid_checkpoints disk_low_action disk_low_script disk_low_threshold
    """,
}


def training_section(key: str) -> str | None:
    """The registry section of a SimpleTuner key that changes what it trains, or None."""
    for section, names in TRAINING_SECTIONS.items():
        if key in names.split():
            return section
    return None
