#!/usr/bin/env python3
"""One forward pass out of an Nsight Compute CSV written by `.ci/gpu_check.sh precision` with
PREC_NCU=1 (lines prefixed with the precision, `ncu --csv --page raw` with duration, DRAM and SM
throughput and DRAM bytes): the last complete pass per precision, kernel by kernel, with its share.

    dev/profiling/ncu_pass.py gpu-check/precision-ncu.csv
"""
import csv
import io
import re
import sys
rows={'fp32':[], 'fp16':[]}; hdr={}
for line in open(sys.argv[1]):
    p, rest = line.split(',',1)
    if not rest.startswith('"'): continue
    r = next(csv.reader(io.StringIO(rest)))
    if r[0]=='ID': hdr[p]=r; continue
    if r[0]=='': continue
    rows[p].append(r)
def num(x): return float(x.replace(',',''))
for p, last_pat in (('fp32', r'softmax_fw'), ('fp16', r'to_f32_kernel')):
    h=hdr[p]; ki=h.index('Kernel Name'); t=h.index('gpu__time_duration.sum'); b=h.index('dram__bytes.sum'); d=h.index('dram__throughput.avg.pct_of_peak_sustained_elapsed'); s=h.index('sm__throughput.avg.pct_of_peak_sustained_elapsed')
    R=rows[p]
    ends=[i for i,r in enumerate(R) if re.search(last_pat, r[ki]) and (i+1==len(R) or not re.search(last_pat, R[i+1][ki]))]
    a,bn=ends[-2]+1,ends[-1]+1
    tot=sum(num(r[t]) for r in R[a:bn]); byt=sum(num(r[b]) for r in R[a:bn])
    print(f"== {p}: pass of {bn-a} kernels, {tot/1e3:.1f} us, {byt/1e6:.0f} MB DRAM ({byt/tot:.0f} GB/s avg)")
    for r in R[a:bn]:
        name=re.sub(r'\(.*','',r[ki])[:90]
        print(f"  {num(r[t])/1e3:8.1f} us {num(r[t])/tot*100:5.1f}%  dram {r[d]:>6}%  sm {r[s]:>6}%  {num(r[b])/1e6:7.1f} MB  {name}")
