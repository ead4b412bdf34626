#!/bin/sh
# Writes zoo.cfg from the environment and runs ZooKeeper in the foreground.
#   ZK_MYID     this server's id (default 1)
#   ZK_SERVERS  ensemble members "1=host1,2=host2,3=host3" (empty: standalone)
#   ZK_TICK_MS  tickTime (default 2000; the minimum session timeout is 2 ticks)
set -e
CONF=/opt/zookeeper
DATA=/data/zookeeper
mkdir -p "$DATA"
echo "${ZK_MYID:-1}" > "$DATA/myid"
{
  echo "tickTime=${ZK_TICK_MS:-2000}"
  echo "initLimit=10"
  echo "syncLimit=5"
  echo "dataDir=$DATA"
  echo "clientPort=2181"
  echo "admin.enableServer=false"
  echo "4lw.commands.whitelist=*"
  echo "maxClientCnxns=0"
  if [ -n "$ZK_SERVERS" ]; then
    echo "$ZK_SERVERS" | tr ',' '\n' | while IFS='=' read -r id host; do
      echo "server.$id=$host:2888:3888"
    done
  fi
} > "$CONF/zoo.cfg"
# zookeeper.jar's manifest carries the rest of the classpath.
exec java -Xmx256m -Dlog4j.configuration=file:$CONF/log4j.properties \
  -cp "$CONF:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$CONF/zoo.cfg"
