"""Where the host time of a call goes, by cause: reads the `bench --profile` output (its tables give
each thread's CPU time per call and its sample count) and the collapsed stacks it wrote with
`--profile-out DIR`, and splits each thread's work into the causes below (first match wins).

    python3 benches/profile_attribution.py PROFILE.md DIR fused-1 sum-1 add-1 ...
"""
import collections, re, sys
prof=open(sys.argv[1]).read()
folded_dir=sys.argv[2]
# per-file scale: thread -> CPU us/call / samples
titles={'fused-1':'rope_pool_fused, 1 tokens','no-k-rot-1':'rope_pool_fused, k_rot off, 1 tokens','add-1':"Burn's q + 1, 1 tokens",'sum-1':"Burn's q.sum_dim(2), 1 tokens",
'fused-32':'rope_pool_fused, 32 tokens','no-k-rot-32':'rope_pool_fused, k_rot off, 32 tokens','add-32':"Burn's q + 1, 32 tokens",'sum-32':"Burn's q.sum_dim(2), 32 tokens"}
# Innermost frames that wait rather than work (as the bench's own table counts them).
WAIT=["ChannelDeviceHandle::submit_inner","custom_channel::Server::start","custom_channel::DeviceClient::enqueue","oneshot","spin_loop","yield_now","thread::park","thread::sleep","futex","sched_yield","nanosleep","syscall"]
CATS=[ # (name, predicate on the whole stack) first match wins
 ('burn custom-op adapter (resolve inputs, register outputs)', lambda s: 'FusionValueAdapter' in s),
 ('ours: launch (cubecl arg registration)', lambda s: 'burn_rope_pool::cube' in s and 'launch_unchecked' in s),
 ('ours: outputs (empty_tensors)', lambda s: 'burn_rope_pool::cube' in s and 'empty_tensors' in s),
 ('ours: rest of the Cube impl', lambda s: 'burn_rope_pool::cube' in s),
 ('ours: caller side (checks, api)', lambda s: 'burn_rope_pool::' in s and 'Fusion as burn_rope_pool' not in s and 'Dispatch as burn_rope_pool' not in s),
 ('burn-fusion: fuser reset after each block', lambda s: 'Processor::reset' in s),
 ('burn-fusion: execute block / strategy', lambda s: 'execute_block_optimization' in s or 'run_strategy' in s),
 ('burn-fusion: register + explore', lambda s: 'burn_fusion::server::FusionServer::register' in s or 'burn_fusion::stream::multi::MultiStream::register' in s or 'Processor::process' in s),
 ('cubecl: memory reservation (initialize_memory)', lambda s: 'initialize_memory' in s),
 ('cubecl/wgpu: kernel launch (bind group, pass, submit)', lambda s: 'Server>::launch' in s or 'WgpuStream' in s or 'SchedulerMultiStream' in s or 'wgpu' in s),
 ('burn dispatch/fusion on the caller (op registration, tensor drops)', lambda s: 'burn_fusion' in s or 'burn_dispatch' in s),
 ('other', lambda s: True),
]
def parse_table(title):
    i=prof.index('#### '+title+'\n'); blk=prof[i:].split('\n#### ')[0]
    wall=float(re.search(r'([\d.]+) µs/call wall',blk).group(1))
    t={}
    for m in re.finditer(r'^\| (\S+(?: \S+)*) \| (\d+) \| ([\d.]+) \|',blk,re.M):
        t[m.group(1)]=(int(m.group(2)),float(m.group(3)))
    return wall,t
for key in sys.argv[3:]:
    wall,t=parse_table(titles[key])
    out=collections.defaultdict(lambda: collections.Counter())
    for line in open(f'{folded_dir}/wgpu-{key}.folded'):
        stack,n=line.rsplit(' ',1); n=int(n); fr=stack.split(';'); th=fr[0]
        if th not in t: continue
        rust=[x for x in fr[1:] if '::' in x]
        leaf=fr[-1]; rl=rust[-1] if rust else ''
        if any(w in leaf or w in rl for w in WAIT): out[th]['(waiting)']+=n; continue
        s=';'.join(fr)
        for name,p in CATS:
            if p(s): out[th][name]+=n*t[th][1]/t[th][0]; break
    print(f'## {key}: {wall} us/call wall')
    for th in sorted(out):
        c=out[th]; work=sum(v for k,v in c.items() if k!='(waiting)')
        print(f'  {th}: CPU {t[th][1]:.1f}, work {work:.1f}')
        for k,v in c.most_common():
            if k!='(waiting)' and v>=0.3: print(f'     {v:5.1f} {k}')
