#!/bin/sh
# conv_sweep_big.sh runs conv_sweep.py over the configuration files of
# calibration/results/big (made without a GPU, in a second):
#
#   cfg_pad.json       the torchvision exports' convolutions whose padding is not k/2
#                      (AlexNet's 11x11 with padding 2, SqueezeNet's 3x3 with none, patches)
#   cfg_eval128.json   the built-in models' eval steps at batch 96 and 128 on 640x640
#                      (conv_configs.go -eval -imgs 640 -batches 96,128)
#   cfg_m128.json      their model steps at batch 96 and 128 on 640x640, fp32 and AMP
#   cfg_imgS.json      their model steps at batch 1 to 32 (powers of two) on SxS images,
#                      S = 672 ... 1280 (conv_configs.go -imgs S -batches 1,2,4,8,16,32)
#
#   cfg_check.json     300 calls of results/conv_sweep.json measured again (each must agree)
#
# in that order (or the NAMEs given after BUDGET), each into OUT/NAME/conv_sweep.json, until
# BUDGET seconds are spent, and packs them into OUT/big.tgz. From the repository root on the
# GPU machine:
#
#   sh calibration/conv_sweep_big.sh "$OUT" 560 [NAME ...]
set -e
out=${1:?usage: conv_sweep_big.sh OUT [BUDGET]}
budget=${2:-560}
if [ $# -ge 2 ]; then shift 2; else shift $#; fi
names=${*:-check pad eval128 m128 img672 img704 img736 img768 img800 img832 img896 img960 img1024 img1280}
start=$(date +%s)
for name in $names; do
	left=$((budget - ($(date +%s) - start)))
	if [ "$left" -lt 20 ]; then
		echo "budget spent before $name" >&2
		break
	fi
	python3 calibration/conv_sweep.py --configs calibration/results/big/cfg_$name.json --out "$out/$name" --budget $((left - 10)) 2>&1 | tail -2
done
tar -C "$out" -czf "$out/big.tgz" $(cd "$out" && ls -d */)
