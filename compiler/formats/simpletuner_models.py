"""SimpleTuner's model registry: the Hugging Face path each model family and flavour trains.

SimpleTuner trains ``HUGGINGFACE_PATHS[model_flavour]`` of the family's model class when a config
leaves ``pretrained_model_name_or_path`` unset, and the class's ``DEFAULT_MODEL_FLAVOUR`` when the
flavour is unset too (``ModelFoundation.setup_model_flavour``, simpletuner/helpers/models/common.py
lines 1203-1230); a family with no default flavour refuses a config without one. Read from
bghira/SimpleTuner at commit bc8e6ab7738ce457a2ed8eb2d26cadd91c6442cb: each family's class, where
its paths are (file:line), and its default flavour. Family names are ``ModelRegistry.register``'s
and ``model_metadata.json``'s (``ModelRegistry.get`` looks both up, lower-cased).
"""

from __future__ import annotations

COMMIT = "bc8e6ab7738ce457a2ed8eb2d26cadd91c6442cb"

#: family -> (default flavour or None, {flavour: Hugging Face path})
MODELS: dict[str, tuple[str | None, dict[str, str]]] = {
    # ace_step: ACEStep, simpletuner/helpers/models/ace_step/model.py:81 (default flavour: line 80)
    "ace_step": ("base", {
        "base": "ACE-Step/ACE-Step-v1-3.5B",
        "v15-turbo": "ACE-Step/Ace-Step1.5",
        "v15-base": "ACE-Step/Ace-Step1.5",
        "v15-sft": "ACE-Step/Ace-Step1.5",
    }),
    # anima: Anima, simpletuner/helpers/models/anima/model.py:66 (default flavour: line 65)
    "anima": ("preview-3", {
        "release": "circlestone-labs/Anima-Base-v1.0-Diffusers",
        "base-v1.0": "circlestone-labs/Anima-Base-v1.0-Diffusers",
        "preview-3": "CalamitousFelicitousness/Anima-Preview-3-sdnext-diffusers",
        "preview-2": "CalamitousFelicitousness/Anima-Preview-2-sdnext-diffusers",
        "preview": "CalamitousFelicitousness/Anima-sdnext-diffusers",
        "gazingstars123-2.9b": "Gazingstars123/Anima-2.9B",
    }),
    # auraflow: Auraflow, simpletuner/helpers/models/auraflow/model.py:76 (default flavour: line 75)
    "auraflow": ("v0.3", {
        "pony": "purplesmartai/pony-v7-base",
        "v0.3": "terminusresearch/auraflow-v0.3",
        "v0.2": "fal/AuraFlow-v0.2",
        "v0.1": "fal/AuraFlow",
    }),
    # boogu_image: BooguImage, simpletuner/helpers/models/boogu_image/model.py:60 (default flavour: line 59)
    "boogu_image": ("v0.1-turbo", {
        "v0.1-base": "SimpleTuner/Boogu-Image-0.1-Base",
        "v0.1-base-fp8": "SimpleTuner/Boogu-Image-0.1-Base",
        "v0.1-turbo": "SimpleTuner/Boogu-Image-0.1-Turbo",
        "v0.1-turbo-fp8": "SimpleTuner/Boogu-Image-0.1-Turbo",
        "v0.1-edit": "SimpleTuner/Boogu-Image-0.1-Edit",
        "v0.1-edit-fp8": "SimpleTuner/Boogu-Image-0.1-Edit",
    }),
    # chroma: Chroma, simpletuner/helpers/models/chroma/model.py:66 (default flavour: line 65)
    "chroma": ("base", {
        "base": "lodestones/Chroma1-Base",
        "hd": "lodestones/Chroma1-HD",
        "flash": "lodestones/Chroma1-Flash",
    }),
    # cosmos: Cosmos2Image, simpletuner/helpers/models/cosmos/model.py:62 (default flavour: line 61)
    "cosmos": ("2b", {
        "2b": "nvidia/Cosmos-Predict2-2B-Text2Image",
        "14b": "nvidia/Cosmos-Predict2-14B-Text2Image",
    }),
    # cosmos2image: Cosmos2Image, simpletuner/helpers/models/cosmos/model.py:62 (default flavour: line 61)
    "cosmos2image": ("2b", {
        "2b": "nvidia/Cosmos-Predict2-2B-Text2Image",
        "14b": "nvidia/Cosmos-Predict2-14B-Text2Image",
    }),
    # cosmos3: Cosmos3Image, simpletuner/helpers/models/cosmos3/model.py:47 (default flavour: line 46)
    "cosmos3": ("nano", {
        "edge": "nvidia/Cosmos3-Edge",
        "nano": "nvidia/Cosmos3-Nano",
        "super": "nvidia/Cosmos3-Super",
        "super-i2v": "nvidia/Cosmos3-Super-Image2Video",
        "super-t2i": "nvidia/Cosmos3-Super-Text2Image",
    }),
    # deepfloyd: DeepFloydIF, simpletuner/helpers/models/deepfloyd/model.py:64 (no default flavour)
    "deepfloyd": (None, {
        "i-medium-400m": "DeepFloyd/IF-I-M-v1.0",
        "i-large-900m": "DeepFloyd/IF-I-L-v1.0",
        "i-xlarge-4.3b": "DeepFloyd/IF-I-XL-v1.0",
        "ii-medium-450m": "DeepFloyd/IF-II-M-v1.0",
        "ii-large-1.2b": "DeepFloyd/IF-II-L-v1.0",
    }),
    # ernie: Ernie, simpletuner/helpers/models/ernie/model.py:46 (default flavour: line 45)
    "ernie": ("base", {
        "base": "baidu/ERNIE-Image",
        "turbo": "baidu/ERNIE-Image-Turbo",
    }),
    # flux: Flux, simpletuner/helpers/models/flux/model.py:90 (default flavour: line 89)
    "flux": ("krea", {
        "dev": "black-forest-labs/flux.1-dev",
        "krea": "black-forest-labs/flux.1-krea-dev",
        "schnell": "black-forest-labs/flux.1-schnell",
        "kontext": "black-forest-labs/flux.1-kontext-dev",
        "fluxbooru": "terminusresearch/fluxbooru-v0.3",
        "libreflux": "jimmycarter/LibreFlux-SimpleTuner",
    }),
    # flux2: Flux2, simpletuner/helpers/models/flux2/model.py:150 (default flavour: line 149)
    "flux2": ("klein-9b", {
        "dev": "black-forest-labs/FLUX.2-dev",
        "klein-4b": "black-forest-labs/FLUX.2-klein-base-4B",
        "klein-9b": "black-forest-labs/FLUX.2-klein-base-9B",
    }),
    # heartmula: HeartMuLa, simpletuner/helpers/models/heartmula/model.py:45 (default flavour: line 44)
    "heartmula": ("3b", {
        "3b": "HeartMuLa/HeartMuLa-oss-3B",
    }),
    # hidream: HiDream, simpletuner/helpers/models/hidream/model.py:80 (default flavour: line 79)
    "hidream": ("full", {
        "dev": "HiDream-ai/HiDream-I1-Dev",
        "full": "HiDream-ai/HiDream-I1-Full",
        "fast": "HiDream-ai/HiDream-I1-Fast",
    }),
    # hunyuanvideo: HunyuanVideo, simpletuner/helpers/models/hunyuanvideo/model.py:69 (default flavour: line 68)
    "hunyuanvideo": ("t2v-480p", {
        "t2v-480p": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v",
        "t2v-720p": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_t2v",
        "t2v-480p-distilled": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v_distilled",
        "i2v-480p": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v",
        "i2v-720p": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_i2v",
        "i2v-480p-distilled": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v_distilled",
        "i2v-720p-distilled": "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_i2v_distilled",
    }),
    # ideogram: Ideogram4, simpletuner/helpers/models/ideogram/model.py:47 (default flavour: line 46)
    "ideogram": ("fp8", {
        "fp8": "ideogram-ai/ideogram-4-fp8",
        "nf4": "ideogram-ai/ideogram-4-nf4",
    }),
    # infinitetalk: InfiniteTalk, simpletuner/helpers/models/infinitetalk/model.py:30 (default flavour: line 29)
    "infinitetalk": ("single-14b-480p", {
        "single-14b-480p": "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",
    }),
    # kandinsky5-image: Kandinsky5Image, simpletuner/helpers/models/kandinsky5_image/model.py:64 (default flavour: line 63)
    "kandinsky5-image": ("t2i-lite-sft", {
        "t2i-lite-sft": "kandinskylab/Kandinsky-5.0-T2I-Lite-sft-Diffusers",
        "t2i-lite-pretrain": "kandinskylab/Kandinsky-5.0-T2I-Lite-pretrain-Diffusers",
        "i2i-lite-sft": "kandinskylab/Kandinsky-5.0-I2I-Lite-sft-Diffusers",
        "i2i-lite-pretrain": "kandinskylab/Kandinsky-5.0-I2I-Lite-pretrain-Diffusers",
    }),
    # kandinsky5-video: Kandinsky5Video, simpletuner/helpers/models/kandinsky5_video/model.py:70 (default flavour: line 69)
    "kandinsky5-video": ("t2v-lite-sft-5s", {
        "t2v-lite-sft-5s": "kandinskylab/Kandinsky-5.0-T2V-Lite-sft-5s-Diffusers",
        "t2v-lite-pretrain-5s": "kandinskylab/Kandinsky-5.0-T2V-Lite-pretrain-5s-Diffusers",
        "t2v-lite-sft-10s": "kandinskylab/Kandinsky-5.0-T2V-Lite-sft-10s-Diffusers",
        "t2v-lite-pretrain-10s": "kandinskylab/Kandinsky-5.0-T2V-Lite-pretrain-10s-Diffusers",
        "t2v-pro-sft-5s-hd": "kandinskylab/Kandinsky-5.0-T2V-Pro-sft-5s-Diffusers",
        "t2v-pro-sft-10s-hd": "kandinskylab/Kandinsky-5.0-T2V-Pro-sft-10s-Diffusers",
        "t2v-pro-pretrain-5s-hd": "kandinskylab/Kandinsky-5.0-T2V-Pro-pretrain-5s-Diffusers",
        "t2v-pro-pretrain-10s-hd": "kandinskylab/Kandinsky-5.0-T2V-Pro-pretrain-10s-Diffusers",
        "i2v-lite-5s": "kandinskylab/Kandinsky-5.0-I2V-Lite-5s-Diffusers",
        "i2v-pro-sft-5s": "kandinskylab/Kandinsky-5.0-I2V-Pro-sft-5s-Diffusers",
    }),
    # kolors: Kolors, simpletuner/helpers/models/kolors/model.py:55 (default flavour: line 54)
    "kolors": ("1.0", {
        "1.0": "terminusresearch/kwai-kolors-1.0",
    }),
    # krea2: Krea2, simpletuner/helpers/models/krea2/model.py:47 (default flavour: line 46)
    "krea2": ("raw", {
        "raw": "krea/Krea-2-Raw",
        "turbo": "krea/Krea-2-Turbo",
    }),
    # longcat_image: LongCatImage, simpletuner/helpers/models/longcat_image/model.py:61 (default flavour: line 60)
    "longcat_image": ("final", {
        "final": "meituan-longcat/LongCat-Image",
        "dev": "meituan-longcat/LongCat-Image-Dev",
        "edit": "meituan-longcat/LongCat-Image-Edit",
    }),
    # longcat_video: LongCatVideo, simpletuner/helpers/models/longcat_video/model.py:61 (default flavour: line 60)
    "longcat_video": ("final", {
        "final": "meituan-longcat/LongCat-Video",
    }),
    # ltxvideo: LTXVideo, simpletuner/helpers/models/ltxvideo/model.py:65 (default flavour: line 64)
    "ltxvideo": ("0.9.5", {
        "0.9.5": "Lightricks/LTX-Video-0.9.5",
        "0.9.0": "Lightricks/LTX-Video",
    }),
    # ltxvideo2: LTXVideo2, simpletuner/helpers/models/ltxvideo2/model.py:194 (default flavour: line 193)
    "ltxvideo2": ("dev", {
        "dev": "Lightricks/LTX-2",
        "dev-fp4": "Lightricks/LTX-2",
        "dev-fp8": "Lightricks/LTX-2",
        "2.3-dev": "dg845/LTX-2.3-Diffusers",
        "2.3-distilled": "dg845/LTX-2.3-Distilled-Diffusers",
        "2.5-dev": "Lightricks/LTX-2.5",
        "2.5-distilled": "Lightricks/LTX-2.5",
    }),
    # lumina2: Lumina2, simpletuner/helpers/models/lumina2/model.py:54 (default flavour: line 53)
    "lumina2": ("2.0", {
        "2.0": "Alpha-VLLM/Lumina-Image-2.0",
        "neta-lumina": "terminusresearch/neta-lumina-v1",
    }),
    # mageflow: MageFlow, simpletuner/helpers/models/mageflow/model.py:53 (default flavour: line 52)
    "mageflow": ("base", {
        "base": "natalie5/Mage-Flow-Base",
        "default": "natalie5/Mage-Flow",
        "turbo": "natalie5/Mage-Flow-Turbo",
        "edit-base": "natalie5/Mage-Flow-Edit-Base",
        "edit": "natalie5/Mage-Flow-Edit",
        "edit-turbo": "natalie5/Mage-Flow-Edit-Turbo",
    }),
    # minimaxh3: MiniMaxH3, simpletuner/helpers/models/minimaxh3/model.py:130 (default flavour: line 129)
    "minimaxh3": ("fl2va", {
        "fl2va": "MiniMaxAI/MiniMax-H3",
        "ref2va": "MiniMaxAI/MiniMax-H3",
        "convrot-int8": "MiniMaxAI/MiniMax-H3",
        "convrot-int4": "MiniMaxAI/MiniMax-H3",
        "nvfp4": "MiniMaxAI/MiniMax-H3",
        "fp8-e4m3fn": "MiniMaxAI/MiniMax-H3",
    }),
    # minimaxmusic: MiniMaxMusic, simpletuner/helpers/models/minimaxmusic/model.py:95 (default flavour: line 94)
    "minimaxmusic": ("music3", {
        "music3": "MiniMaxAI/MiniMax-Music3",
    }),
    # omnigen: OmniGen, simpletuner/helpers/models/omnigen/model.py:39 (default flavour: line 38)
    "omnigen": ("v1", {
        "v1": "Shitao/OmniGen-v1-diffusers",
    }),
    # pixart: PixartSigma, simpletuner/helpers/models/pixart/model.py:74 (default flavour: line 73)
    "pixart": ("900M-1024-v0.6", {
        "900M-1024-v0.6": "terminusresearch/pixart-900m-1024-ft-v0.6",
        "900M-1024-v0.7-stage1": "terminusresearch/pixart-900m-1024-ft-v0.7-stage1",
        "900M-1024-v0.7-stage2": "terminusresearch/pixart-900m-1024-ft-v0.7-stage2",
        "600M-512": "PixArt-alpha/PixArt-Sigma-XL-2-512-MS",
        "600M-1024": "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS",
        "600M-2048": "PixArt-alpha/PixArt-Sigma-XL-2-2K-MS",
    }),
    # pixart_sigma: PixartSigma, simpletuner/helpers/models/pixart/model.py:74 (default flavour: line 73)
    "pixart_sigma": ("900M-1024-v0.6", {
        "900M-1024-v0.6": "terminusresearch/pixart-900m-1024-ft-v0.6",
        "900M-1024-v0.7-stage1": "terminusresearch/pixart-900m-1024-ft-v0.7-stage1",
        "900M-1024-v0.7-stage2": "terminusresearch/pixart-900m-1024-ft-v0.7-stage2",
        "600M-512": "PixArt-alpha/PixArt-Sigma-XL-2-512-MS",
        "600M-1024": "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS",
        "600M-2048": "PixArt-alpha/PixArt-Sigma-XL-2-2K-MS",
    }),
    # qwen_image: QwenImage, simpletuner/helpers/models/qwen_image/model.py:83 (default flavour: line 82)
    "qwen_image": ("v2.0", {
        "v1.0": "Qwen/Qwen-Image",
        "v2.0": "Qwen/Qwen-Image-2512",
        "edit-v1": "Qwen/Qwen-Image-Edit",
        "edit-v2": "Qwen/Qwen-Image-Edit-2509",
        "edit-v2+": "Qwen/Qwen-Image-Edit-2509",
        "edit-v3": "Qwen/Qwen-Image-Edit-2511",
    }),
    # sana: Sana, simpletuner/helpers/models/sana/model.py:61 (default flavour: line 60)
    "sana": ("sana1.5-4.8b-1024", {
        "sana1.5-4.8b-1024": "Efficient-Large-Model/SANA1.5_4.8B_1024px_diffusers",
        "sana1.5-1.6b-1024": "Efficient-Large-Model/SANA1.5_1.6B_1024px_diffusers",
        "sana1.0-1.6b-2048": "Efficient-Large-Model/Sana_1600M_2Kpx_BF16_diffusers",
        "sana1.0-1.6b-1024": "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers",
        "sana1.0-600m-1024": "Efficient-Large-Model/Sana_600M_1024px_diffusers",
        "sana1.0-600m-512": "Efficient-Large-Model/Sana_600M_512px_diffusers",
    }),
    # sanavideo: SanaVideo, simpletuner/helpers/models/sanavideo/model.py:66 (default flavour: line 65)
    "sanavideo": ("2b-480p", {
        "2b-480p": "Efficient-Large-Model/SANA-Video_2B_480p_diffusers",
    }),
    # sd1x: StableDiffusion1, simpletuner/helpers/models/sd1x/model.py:77 (default flavour: line 76)
    "sd1x": ("dreamshaper", {
        "1.5": "stable-diffusion-v1-5/stable-diffusion-v1-5",
        "1.4": "CompVis/stable-diffusion-v1-4",
        "dreamshaper": "Lykon/dreamshaper-8",
        "realvis": "SG161222/RealVisXL_V5.0",
    }),
    # sd2x: StableDiffusion2, simpletuner/helpers/models/sd1x/model.py:362 (default flavour: line 361)
    "sd2x": ("pseudoflex-v2", {
        "digitaldiffusion": "Junglerally/Digital-Diffusion",
        "pseudoflex-v2": "bghira/pseudo-flex-v2",
        "pseudojourney": "bghira/pseudo-journey-v2",
        "2.1": "stabilityai/stable-diffusion-2-1",
        "2.0": "stabilityai/stable-diffusion-2-0",
    }),
    # sd3: SD3, simpletuner/helpers/models/sd3/model.py:136 (default flavour: line 135)
    "sd3": ("medium", {
        "medium": "stabilityai/stable-diffusion-3.5-medium",
        "large": "stabilityai/stable-diffusion-3.5-large",
    }),
    # sdxl: SDXL, simpletuner/helpers/models/sdxl/model.py:87 (default flavour: line 86)
    "sdxl": ("base-1.0", {
        "base-1.0": "stabilityai/stable-diffusion-xl-base-1.0",
        "refiner-1.0": "stabilityai/stable-diffusion-xl-refiner-1.0",
        "base-0.9": "stabilityai/stable-diffusion-xl-base-0.9",
        "refiner-0.9": "stabilityai/stable-diffusion-xl-refiner-0.9",
    }),
    # stable_cascade: StableCascadeStageC, simpletuner/helpers/models/stable_cascade/model.py:67 (default flavour: line 66)
    "stable_cascade": ("stage-c", {
        "stage-c": "stabilityai/stable-cascade-prior",
        "stage-c-lite": "stabilityai/stable-cascade-prior",
    }),
    # wan: Wan, simpletuner/helpers/models/wan/model.py:307 (default flavour: line 302)
    "wan": ("t2v-480p-1.3b-2.1", {
        "t2v-480p-1.3b-2.1": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
        "t2v-480p-14b-2.1": "Wan-AI/Wan2.1-T2V-14B-Diffusers",
        "i2v-14b-2.1": "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",
        "i2v-14b-2.1-720p": "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers",
        "i2v-14b-2.2-high": "Wan-AI/Wan2.2-I2V-A14B-Diffusers",
        "i2v-14b-2.2-low": "Wan-AI/Wan2.2-I2V-A14B-Diffusers",
        "animegen-t2v-high": "Wan-AI/Wan2.2-T2V-A14B-Diffusers",
        "animegen-t2v-low": "Wan-AI/Wan2.2-T2V-A14B-Diffusers",
        "flf2v-14b-2.1": "Wan-AI/Wan2.1-FLF2V-14B-720P-diffusers",
        "vace-1.3b-2.1": "Wan-AI/Wan2.1-VACE-1.3B-diffusers",
        "vace-14b-2.1": "Wan-AI/Wan2.1-VACE-14B-diffusers",
        "ti2v-5b-2.2": "Wan-AI/Wan2.2-TI2V-5B-Diffusers",
    }),
    # wan_s2v: WanS2V, simpletuner/helpers/models/wan_s2v/model.py:59 (default flavour: line 58)
    "wan_s2v": ("s2v-14b-2.2", {
        "s2v-14b-2.2": "tolgacangoz/Wan2.2-S2V-14B-Diffusers",
    }),
    # z_image: ZImage, simpletuner/helpers/models/z_image/model.py:58 (default flavour: line 64)
    "z_image": ("turbo-ostris-v2", {
        "base": "TONGYI-MAI/Z-Image",
        "turbo": "TONGYI-MAI/Z-Image-Turbo",
        "turbo-ostris-v2": "TONGYI-MAI/Z-Image-Turbo",
        "ostris-de-turbo": "TONGYI-MAI/Z-Image-Turbo",
    }),
    # z_image_omni: ZImageOmni, simpletuner/helpers/models/z_image_omni/model.py:43 (default flavour: line 47)
    "z_image_omni": ("base", {
        "base": "TONGYI-Lab/Z-Image-Base",
        "edit": "TONGYI-Lab/Z-Image-Edit",
    }),
    # zlab_i1: ZLabI1, simpletuner/helpers/models/zlab_i1/model.py:58 (default flavour: line 57)
    "zlab_i1": ("3b", {
        "3b": "bghira/zlab-i1-diffusers",
    }),
}
# SimpleTuner registers the Kandinsky 5 families under both spellings (hyphen and underscore,
# the same classes): one table each.
MODELS["kandinsky5_image"] = MODELS["kandinsky5-image"]
MODELS["kandinsky5_video"] = MODELS["kandinsky5-video"]


def model_path(family: str, flavour: str | None) -> tuple[str | None, str]:
    """The path SimpleTuner trains for ``family``/``flavour`` and how it got it, or None and why
    not (the key to set)."""
    entry = MODELS.get(family.strip().lower())
    if entry is None:
        return None, (f"model_family {family!r} is not in SimpleTuner's model registry (at {COMMIT[:12]}), so the "
                      "model it trains cannot be derived")
    default, paths = entry
    if flavour is None:
        if default is None:
            return None, (f"model_family {family!r} has no default model_flavour in SimpleTuner (it refuses such a "
                          f"config); flavours: {', '.join(paths)}")
        return paths[default], f"SimpleTuner's model for model_family {family!r}, its default flavour {default!r}"
    if flavour not in paths:
        return None, (f"model_flavour {flavour!r} is not one of model_family {family!r}'s flavours in SimpleTuner "
                      f"({', '.join(paths)})")
    return paths[flavour], f"SimpleTuner's model for model_family {family!r}, model_flavour {flavour!r}"
