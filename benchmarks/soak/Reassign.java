// The soak's partition reassignment, through Kafka's own Admin API (confluent-kafka has none): moves the replicas of
// each named partition to the brokers given, waits until Kafka reports the reassignment done, then elects the
// preferred leaders. Run as a single-file program on the classpath of the devkit's Kafka jars:
//
//   java -cp KAFKA_JARS Reassign.java BOOTSTRAP TOPIC PARTITION=BROKER,BROKER ...
//
// Prints one line: what moved and how long Kafka took.

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;

public class Reassign {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Reassign BOOTSTRAP TOPIC PARTITION=BROKER,BROKER ...");
            System.exit(2);
        }
        Properties settings = new Properties();
        settings.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        settings.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "120000");
        Map<TopicPartition, Optional<NewPartitionReassignment>> moves = new HashMap<>();
        for (int i = 2; i < args.length; i++) {
            String[] parts = args[i].split("=");
            List<Integer> brokers = new ArrayList<>();
            for (String broker : parts[1].split(",")) {
                brokers.add(Integer.parseInt(broker));
            }
            moves.put(new TopicPartition(args[1], Integer.parseInt(parts[0])),
                      Optional.of(new NewPartitionReassignment(brokers)));
        }
        long began = System.nanoTime();
        try (Admin admin = Admin.create(settings)) {
            admin.alterPartitionReassignments(moves).all().get(120, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(600);
            while (!admin.listPartitionReassignments(moves.keySet()).reassignments().get(60, TimeUnit.SECONDS)
                    .isEmpty()) {
                if (System.nanoTime() > deadline) {
                    System.err.println("the reassignment was not done in 600 s");
                    System.exit(1);
                }
                Thread.sleep(1000);
            }
            long moved = System.nanoTime();
            Set<TopicPartition> partitions = new HashSet<>(moves.keySet());
            // A partition whose preferred leader already leads reports ELECTION_NOT_NEEDED: not a failure.
            admin.electLeaders(ElectionType.PREFERRED, partitions).partitions().get(60, TimeUnit.SECONDS);
            System.out.printf("%d partitions of %s moved in %.1f s%n", moves.size(), args[1],
                              (moved - began) / 1e9);
        }
    }
}
