"""Write a random Llama checkpoint folder for `attndsl bench --decode` (nothing downloads):
config.json, model.safetensors, generation_config.json and a word-level tokenizer (token ids
t0 .. t{V-1}; onnxruntime-genai's model builder wants one). The default is the 106M-parameter
model of BENCHMARKS.md: hidden 1024, 8 layers, 16 heads, 4 kv heads, intermediate 2816,
vocab 8000, float32.

    python benchmarks/make_llama.py OUT_DIR [--window 4096] [--layers 8]

`--window W` makes it a Mistral (a sliding window of W keys) instead."""

from __future__ import annotations

import argparse

import torch
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--context", type=int, default=32768)
    p.add_argument("--window", type=int, default=None, help="a Mistral with this window")
    args = p.parse_args()
    sizes = dict(hidden_size=args.hidden, num_hidden_layers=args.layers,
                 num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                 intermediate_size=args.intermediate, vocab_size=args.vocab,
                 max_position_embeddings=args.context, bos_token_id=1, eos_token_id=2,
                 pad_token_id=0, tie_word_embeddings=False)
    if args.window:
        config = tf.MistralConfig(sliding_window=args.window, **sizes)
    else:
        config = tf.LlamaConfig(**sizes)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(args.out)
    model.generation_config.save_pretrained(args.out)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(args.vocab)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tf.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0", bos_token="t1",
                               eos_token="t2", pad_token="t0").save_pretrained(args.out)
    params = sum(t.numel() for t in model.parameters())
    print(f"wrote {args.out}: {type(model).__name__}, {params / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
