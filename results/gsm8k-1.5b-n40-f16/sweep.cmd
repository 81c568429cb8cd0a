tierkv sweep --dir results/gsm8k-1.5b-n40-f16 --no-plot --policies full -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task gsm8k --data ../shared/data/gsm8k_test.jsonl --n 40 --max-tokens 1024 --parallel 16
# tables and plots: tierkv sweep --dir results/gsm8k-1.5b-n40-f16 --table-only --policies full (same eval flags)
