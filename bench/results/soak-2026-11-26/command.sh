# The soak of 2026-11-26 (issue 21): the fixed configuration, every fault kind of the
# design's fault model (disk damage left out: overlapping it with other faults is outside
# the model), two lanes overlapping, one hour. Brokers ran the images of 169d979.
# The run directory goes to chaoslog's default, runs/RUN_ID (ignored by git); --out DIR overrides.
cd "$(dirname "$0")/../../.."
exec .venv/bin/chaoslog run --backend docker --brokers 4 --zookeepers 3 --topics 2 --partitions 3 \
  --replication-factor 3 --rate 200 --producers 3 --mix idempotent,all,1 --fetchers 1 \
  --sub-via subscribe --commit manual --crash-clients 120 \
  --broker-config min.insync.replicas=2 unclean.leader.election.enable=false replication.truncation=leader-epoch \
  --faults kill:2,stop,pause,hard-bounce,clean-bounce,partition-isolate,partition-halves,partition-ring,partition-bridge,partition-one-way,partition-zk,partition-clients,latency,bandwidth,slicer,reset-peer,link-timeout,zk-expire,zk-pause,zk-kill,elect-preferred,move-leader,reassign,add-partitions,recreate-topic,isr-shrink-then-leader-loss,restarted-follower-elected \
  --overlap 2 --interval 3,8 --fault-duration 4,12 --duration 3600 --seed 2611 "$@"
