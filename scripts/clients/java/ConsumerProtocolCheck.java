// The reference client's KIP-848 consumer (group.protocol=consumer) against a cluster: two consumers share a
// topic, one leaves and the other takes over every partition, every record is consumed; the Admin client
// describes the group as a CONSUMER group.
// Run in Java's source-file mode with Kafka's jars (no build step):
//   java -cp "$HOME/.cache/epochkraft/peers/kafka-4.4.0/libs/*" ConsumerProtocolCheck.java HOST:PORT TOPIC GROUP
// Prints one "OK ..." line per check and exits 0, or prints the failure and exits 1.

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConsumerProtocolCheck {
    static final int PARTITIONS = 6;
    static final int RECORDS = 300;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        try {
            run(bootstrap, topic, group);
        } catch (Exception e) {
            e.printStackTrace(System.out);
            System.out.println("FAILED " + e);
            System.exit(1);
        }
        System.exit(0);
    }

    static void run(String bootstrap, String topic, String group) throws Exception {
        Properties adminProps = new Properties();
        adminProps.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 3))).all().get(30, TimeUnit.SECONDS);
            Set<String> first = produce(bootstrap, topic, 0);
            KafkaConsumer<String, String> a = consumer(bootstrap, group), b = consumer(bootstrap, group);
            a.subscribe(List.of(topic));
            b.subscribe(List.of(topic));
            Set<String> seen = new HashSet<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline
                    && !(a.assignment().size() == 3 && b.assignment().size() == 3 && seen.containsAll(first))) {
                for (KafkaConsumer<String, String> c : List.of(a, b)) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) seen.add(r.value());
                }
            }
            check(a.assignment().size() == 3 && b.assignment().size() == 3,
                "assigned " + a.assignment() + " / " + b.assignment());
            check(seen.containsAll(first), "consumed " + seen.size() + " of " + first.size());
            System.out.println("OK two consumers share the topic assigned=3+3 read=" + first.size());

            ConsumerGroupDescription described =
                admin.describeConsumerGroups(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group);
            System.out.println("OK describeConsumerGroups type=" + described.type() + " members="
                + described.members().size() + " state=" + described.groupState());

            b.close(Duration.ofSeconds(10));  // leaves the group: a takes over
            Set<String> second = produce(bootstrap, topic, RECORDS);
            Set<String> later = new HashSet<>();
            deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline
                    && !(a.assignment().size() == PARTITIONS && later.containsAll(second))) {
                for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(100))) later.add(r.value());
            }
            check(a.assignment().size() == PARTITIONS, "after the leave " + a.assignment());
            check(later.containsAll(second), "consumed " + later.size() + " of " + second.size());
            System.out.println("OK one consumer takes over assigned=" + PARTITIONS + " read=" + second.size());
            a.commitSync();
            a.close(Duration.ofSeconds(10));
        }
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("group.protocol", "consumer");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(props);
    }

    static Set<String> produce(String bootstrap, String topic, int start) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        Set<String> values = new HashSet<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = start; i < start + RECORDS; i++) {
                String value = "v" + i;
                producer.send(new ProducerRecord<>(topic, "k" + i, value));
                values.add(value);
            }
            producer.flush();
        }
        return values;
    }

    static void check(boolean condition, String what) {
        if (!condition) throw new AssertionError(what);
    }
}
