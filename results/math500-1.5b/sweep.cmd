tierkv sweep --dir results/math500-1.5b --no-plot --policies full -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task math500 --data ../shared/data/math500_test.jsonl --n 50 --max-tokens 1024 --parallel 16
tierkv sweep --dir results/math500-1.5b --no-plot --policies hierarchy --t0 0.5 --evict 0.03 -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task math500 --data ../shared/data/math500_test.jsonl --n 50 --max-tokens 1024 --parallel 16
tierkv sweep --dir results/math500-1.5b --no-plot --policies full -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --task math500 --data ../shared/data/math500_test.jsonl --n 100 --max-tokens 1024 --parallel 16
# tables and plots: tierkv sweep --dir results/math500-1.5b --table-only --policies full,hierarchy --t0 0.5 --evict 0.03 (same eval flags, --n as run)
