#!/bin/sh
# Launcher test workload (tests/adapters/trial_launcher_memory_test.cpp): a rank that prints the
# metrics protocol with no peak memory, as a GPU job whose script reports none. It names its pid
# in the trial directory (rank-N.pid) for the fake nvidia-smi that stands in for the driver.
# Usage: device_memory_train.sh STEPS STEP_SECONDS
steps=$1
step_time=$2
echo $$ > "$INFRARSI_TRIAL_DIR/rank-${RANK:-0}.pid"
step=0
while [ "$step" -lt "$steps" ]; do
  sleep "$step_time"
  echo "INFRARSI_METRICS {\"step\": $step, \"loss\": 2.5, \"tokens\": 1024, \"step_time_s\": $step_time}"
  step=$((step + 1))
done
echo "INFRARSI_METRICS {\"event\": \"final\", \"status\": \"ok\", \"steps\": $steps}"
