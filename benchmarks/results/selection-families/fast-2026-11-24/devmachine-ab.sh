#!/bin/bash
# usage: ab.sh family rounds
fam=$1; rounds=${2:-2}
for r in $(seq $rounds); do
  for side in base mine; do
    if [ $side = base ]; then dir=/tmp/fast3/base; else dir=/work/wt/fast3; fi
    (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python benchmarks/selection.py --targets "" --passes 5 --family $fam --out /tmp/fast3/ab-$side.json > /dev/null 2>&1)
    /work/main/.venv/bin/python -c "
import json; d=json.load(open('/tmp/fast3/ab-$side.json'))
print('$side', '$fam', ' '.join(f\"{r['call'].split('=')[1][:-1]}:{r['new_us']:.0f}/{r['repeated_us']:.1f}\" for r in d['rows']))"
  done
done
