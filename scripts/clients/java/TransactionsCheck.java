// The reference client's transactional producer (kafka-clients) against a cluster, with whatever
// transaction.version the cluster has finalized (2: KIP-890 part 2, the producer sends no
// AddPartitionsToTxn or AddOffsetsToTxn and every commit or abort bumps its epoch).
// Run in Java's source-file mode with Kafka's jars (no build step):
//   java -cp "$HOME/.cache/epochkraft/peers/kafka-4.4.0/libs/*" TransactionsCheck.java HOST:PORT TOPIC
// Three transactions (commit, abort, commit with the group's offsets), then a read_committed consumer
// and a read_uncommitted one. Prints one "OK ..." line per check and exits 0, or the failure and exits 1.

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionsCheck {
    static final int PER_TRANSACTION = 30;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        try (Admin admin = Admin.create(props(bootstrap))) {
            FinalizedVersionRange tv = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS)
                .finalizedFeatures().get("transaction.version");
            System.out.println("OK transaction.version=" + (tv == null ? 0 : tv.maxVersionLevel()));
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3))).all().get(60, TimeUnit.SECONDS);
            String txnId = topic + "-txn";
            String group = topic + "-group";
            produce(bootstrap, topic, txnId, group);
            TransactionDescription described = null;
            for (int i = 0; i < 100; i++) {  // the markers of the last commit may still be in flight
                described = admin.describeTransactions(List.of(txnId)).all().get(30, TimeUnit.SECONDS).get(txnId);
                if (described.state() == TransactionState.COMPLETE_COMMIT) break;
                Thread.sleep(100);
            }
            System.out.println("OK describeTransactions state=" + described.state()
                + " producerEpoch=" + described.producerEpoch());
            long committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                .get(30, TimeUnit.SECONDS).get(new TopicPartition(topic, 0)).offset();
            System.out.println("OK transactional offset committed=" + committed);
            consume(bootstrap, topic, "read_committed");
            consume(bootstrap, topic, "read_uncommitted");
        } catch (Exception e) {
            e.printStackTrace(System.out);
            System.out.println("FAILED " + e);
            System.exit(1);
        }
        System.exit(0);
    }

    static Properties props(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        return props;
    }

    // Commit, abort, commit with offsets: records are "<transaction>-<n>", spread over the partitions.
    static void produce(String bootstrap, String topic, String txnId, String group) throws Exception {
        Properties props = props(bootstrap);
        props.put("transactional.id", txnId);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            String[] outcomes = {"commit", "abort", "commit"};
            for (int t = 0; t < outcomes.length; t++) {
                producer.beginTransaction();
                for (int i = 0; i < PER_TRANSACTION; i++) {
                    String value = t + "-" + i;
                    producer.send(new ProducerRecord<>(topic, i % 3, value, value)).get(30, TimeUnit.SECONDS);
                }
                if (t == 2) {
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    offsets.put(new TopicPartition(topic, 0), new OffsetAndMetadata(42));
                    producer.sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata(group, -1, "", Optional.empty()));
                }
                if (outcomes[t].equals("commit")) producer.commitTransaction();
                else producer.abortTransaction();
                System.out.println("OK transaction " + t + " " + outcomes[t]);
            }
        }
    }

    // Everything readable at the isolation level: the transactions' record counts, in transaction order.
    static void consume(String bootstrap, String topic, String isolation) {
        Properties props = props(bootstrap);
        props.put("isolation.level", isolation);
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        int[] counts = new int[3];
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = List.of(
                new TopicPartition(topic, 0), new TopicPartition(topic, 1), new TopicPartition(topic, 2));
            consumer.assign(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, Duration.ofSeconds(30));
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline
                    && partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    counts[Integer.parseInt(r.value().split("-")[0])]++;
                }
            }
        }
        System.out.println("OK " + isolation + " per transaction=" + counts[0] + "," + counts[1] + "," + counts[2]);
    }
}
