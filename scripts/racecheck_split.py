import re, sys
# A hazard record: the line "... Race reported between ..." and its continuation lines. Hazards
# inside third-party kernels (cuBLASLt's GEMM kernels (nvjet_*, cutlass) and split-K reductions, which linear and
# group_gemm call) are reported apart; any other hazard is kite's and fails.
third_party = re.compile(r"cublas|cutlass|xmma|nvjet_|splitKreduce|sm\d+_\w*gemm|gemv2?[NT]_kernel", re.I)
records, cur = [], None
for line in open(sys.argv[1], errors="replace"):
    body = line.strip().lstrip("=").strip()
    if re.search(r"(Error|Warning): Race reported", body, re.I):
        cur = [body]
        records.append(cur)
    elif cur is not None and body and not re.match(r"(RACECHECK SUMMARY|Error|Warning)", body):
        cur.append(body)
    else:
        cur = None
ours = [r for r in records if not third_party.search(" ".join(r))]
print(f"racecheck: {len(records)} hazard reports, {len(records) - len(ours)} in third-party "
      f"kernels (cuBLASLt: reported, not failed), {len(ours)} in kite's kernels")
for r in ours[:10]:
    print("  kite hazard:", " / ".join(r)[:300])
sys.exit(1 if ours else 0)
