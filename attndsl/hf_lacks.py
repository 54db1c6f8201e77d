"""What attndsl lacks to import each causal-LM model type of transformers 5.23 that it refuses
as "not one attndsl imports": model_type -> one phrase naming the mechanism(s), read from the
type's transformers modeling file. The import's refusal (hf_fields.unknown_family) reads it, so
a user learns why, not only that; the phrases also plan which mechanism unlocks the most types.
A type attndsl imports (families.FAMILIES) has no entry (a test holds it)."""

from __future__ import annotations

__all__ = ["LACKS"]

_MAMBA = "Mamba selective state-space layers (S6 scan with a causal depthwise conv)"
_MAMBA2 = "Mamba2 state-space (SSD) layers"
_DSA = "its own DeepSeek sparse attention (not yet read into attndsl's `indexer`)"

# model_type -> what attndsl lacks to import it, sorted by model type
LACKS: dict[str, str] = {
    "axk2": f"{_DSA}, a low-rank sigmoid-gated RMSNorm and a sigmoid gate on latent attention's "
            "output",
    "cpmant": "CPM-Ant's segment-aware bucketed relative-position bias and prompt/segment "
              "embeddings",
    "deepseek_v4": "compressed sparse attention (KV compressors scored by an indexer) and "
                   "hyper-connections between layers",
    "doge": "dynamic mask attention (a learned per-key mask from the values) and a cross-domain "
            "mixture of experts (CDMoE) of product-key experts",
    "gemma3n_text": "AltUp's parallel residual streams, the LAuReL low-rank residual and "
                    "activation sparsity by a Gaussian top-k (its per-layer inputs and its "
                    "keys and values shared across layers are in the language, as Gemma 4's)",
    "hrm_text": "two transformer stacks (H and L modules) run in nested recurrent cycles "
                "(Hierarchical Reasoning Model)",
    "hy_v4": f"{_DSA} and hyper-connections between layers",
    "inkling2_text": "a hidden-state-conditioned relative-position bias, dynamic short "
                     "convolutions and block attention residuals",
    "minimax_m3_vl_text": "a lightning indexer keeping each query's top key blocks (block-sparse "
                          "attention)",
    "recurrent_gemma": "Griffin's recurrent blocks (RG-LRU with a causal conv)",
    "reformer": "LSH bucketed attention, reversible layers and axial position embeddings",
    "rwkv": "RWKV's time-mix (WKV recurrence) and channel-mix blocks",
    "xlnet": "two-stream relative attention (permutation language modelling)",
    "xlstm": "recurrent xLSTM (mLSTM) blocks",
    "zamba": f"{_MAMBA} with one shared attention block tied across its hybrid layers",
    "zaya": "Compressed Convolutional Attention (q/k/v through convolutions over a compressed "
            "latent) with an MLP router",
}
