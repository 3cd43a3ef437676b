#!/bin/bash
# Give QEMU's main thread (the main loop: the volume's throttle timers, the NBD client)
# SCHED_FIFO 5 once it starts; vCPU threads stay normal.
for i in $(seq 1 600); do
  pid=$(pgrep -o -f qemu-system-x86_64)
  if [ -n "$pid" ]; then sleep 3; chrt -f -p 5 "$pid" && chrt -p "$pid"; exit 0; fi
  sleep 0.5
done
