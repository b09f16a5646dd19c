# Sourced by the benchmark scripts: net_flags=(--net a --net b ...) for every net of
# layers.json, or for NETS="a b c" when set (numpy: the 260-340 GFLOP srgan_x4, esrgan_x4 and
# unet take too long).
all_nets="resnet50 vgg16 mobilenet_v2 mobilenet_v2_depthwise squeezenet1_1"
all_nets+=" squeezenet1_1_torchvision inception_v3 yolov3_416 alexnet alexnet_bvlc srgan_x4"
all_nets+=" esrgan_x4 unet"
read -r -a nets <<< "${NETS:-$all_nets}"
net_flags=()
for n in "${nets[@]}"; do net_flags+=(--net "$n"); done
