# the first 100 problems of each file were copied from results/gsm8k-1.5b-n100 (same binary, f32 KV cache) and resumed with --n 200:
tierkv sweep --dir results/gsm8k-1.5b-n200 --no-plot --policies full -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task gsm8k --data ../shared/data/gsm8k_test.jsonl --n 200 --max-tokens 1024 --parallel 16
tierkv sweep --dir results/gsm8k-1.5b-n200 --no-plot --policies hierarchy --t0 0.5 --evict 0.03 -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task gsm8k --data ../shared/data/gsm8k_test.jsonl --n 200 --max-tokens 1024 --parallel 16
tierkv sweep --dir results/gsm8k-1.5b-n200 --no-plot --policies hierarchy --t0 0.5 --evict 0.1 -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task gsm8k --data ../shared/data/gsm8k_test.jsonl --n 200 --max-tokens 1024 --parallel 16
tierkv sweep --dir results/gsm8k-1.5b-n200 --no-plot --policies evict --t0 0.5 -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task gsm8k --data ../shared/data/gsm8k_test.jsonl --n 200 --max-tokens 1024 --parallel 16
# tables and plots: tierkv sweep --dir results/gsm8k-1.5b-n200 --table-only --policies full,hierarchy,evict --t0 0.5 --evict 0.03,0.1 (same eval flags)
