"""A .cu file as the CUDA emulation compiles it (tests/cuda_emu/nvcc-emu): each launch
`k<<<grid, block[, shared[, stream]]>>>(args)` becomes `emu::launch("k", &k, grid, block, ...)(args)`,
`extern __shared__ T name[];` a pointer to the emulator's dynamic shared memory, and each other
`__shared__` declaration is followed by a call that tells the emulator the block uses it.
Usage: python3 rewrite.py IN.cu OUT.cpp"""
import re
import sys

src_path, out_path = sys.argv[1], sys.argv[2]
src = open(src_path).read()
launch = re.compile(r'([A-Za-z_]\w*(?:<[^;{}()]*?>)?)<<<(.+?)>>>\(', re.S)
src = launch.sub(lambda m: 'emu::launch("%s", &%s, %s)(' % (m.group(1), m.group(1), m.group(2)), src)
src = re.sub(r'extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;', r'\1 *\2 = (\1 *)emu::t_dyn_smem;', src)
# each `__shared__ T name[...];` tells the emulator what the block uses (emu::shared_used)
src = re.sub(r'(__shared__\s[^;{}()]*?\b(\w+)\s*(?:\[[^\]]*\]\s*)*;)', r'\1 emu::shared_used(&\2, sizeof \2);', src)
if '<<<' in src:
    sys.exit('rewrite.py: a launch it cannot read is left in ' + src_path)
with open(out_path, 'w') as f:
    f.write('#line 1 "%s"\n%s' % (src_path, src))
