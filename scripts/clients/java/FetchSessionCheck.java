// The reference consumer (kafka-clients) reading several partitions while a producer writes to them, over
// the broker's incremental fetch sessions (KIP-227): every record read once, in order, with no gap.
// The consumer's FetchSessionHandler logs at DEBUG to stdout, so the caller sees the sessions it used.
// Run in Java's source-file mode with Kafka's jars (no build step):
//   java -cp "$HOME/.cache/epochkraft/peers/kafka-4.4.0/libs/*" FetchSessionCheck.java HOST:PORT TOPIC PARTITIONS RECORDS
// Prints "OK read=N partitions=P" and exits 0, or prints the failure and exits 1.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class FetchSessionCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int records = Integer.parseInt(args[3]);
        try {
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
            }
            Thread producer = new Thread(() -> produce(bootstrap, topic, partitions, records));
            int read = consume(bootstrap, topic, partitions, records, producer);
            producer.join();
            System.out.println("OK read=" + read + " partitions=" + partitions);
        } catch (Exception e) {
            e.printStackTrace(System.out);
            System.out.println("FAILED " + e);
            System.exit(1);
        }
        System.exit(0);
    }

    // A few records at a time to one partition after another, with pauses, so they arrive while the
    // consumer's incremental fetches wait.
    static void produce(String bootstrap, String topic, int partitions, int records) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("linger.ms", "0");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, (i / 5) % partitions, null, "value-" + i)).get();
                if (i % 5 == 4) Thread.sleep(20);
            }
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    static int consume(String bootstrap, String topic, int partitions, int records, Thread producer) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("fetch.max.wait.ms", "200");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        List<TopicPartition> assigned = new ArrayList<>();
        for (int p = 0; p < partitions; p++) assigned.add(new TopicPartition(topic, p));
        Map<Integer, Long> next = new HashMap<>();
        int read = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(assigned);
            consumer.seekToBeginning(assigned);
            producer.start();
            long deadline = System.currentTimeMillis() + 60_000;
            while (read < records) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("read " + read + " of " + records + " records");
                }
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    long expected = next.getOrDefault(record.partition(), 0L);
                    if (record.offset() != expected) {
                        throw new IllegalStateException(record.topic() + "-" + record.partition() + " offset "
                            + record.offset() + ", expected " + expected);
                    }
                    next.put(record.partition(), expected + 1);
                    read++;
                }
            }
        }
        return read;
    }
}
