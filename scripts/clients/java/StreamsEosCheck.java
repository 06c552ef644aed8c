// A Kafka Streams application against a cluster: INPUT (keyed records whose value is "<group>:<seq>") ->
// selectKey(<group>) (a repartition topic) -> groupByKey().count() (a RocksDB store and its changelog) ->
// OUTPUT (<group> -> running count, a long). It runs until a read_committed consumer of OUTPUT has seen every
// group's count reach PER_GROUP, or until the deadline.
// Run in Java's source-file mode with Kafka's jars (no build step):
//   java -cp "$HOME/.cache/epochkraft/peers/kafka-4.4.0/libs/*" StreamsEosCheck.java \
//       HOST:PORT INPUT OUTPUT APP_ID GUARANTEE GROUPS PER_GROUP DEADLINE_S STATE_DIR
// GUARANTEE is exactly_once_v2 or at_least_once. Prints "OUTPUT n" (committed output records so far) about
// every second, then "DONE n" and exits 0, or "TIMEOUT ..." / "FAILED ..." and exits 1.

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsEosCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], appId = args[3], guarantee = args[4];
        int groups = Integer.parseInt(args[5]);
        long perGroup = Long.parseLong(args[6]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[7]) * 1000;
        String stateDir = args[8];
        KafkaStreams streams = new KafkaStreams(topology(input, output), config(bootstrap, appId, guarantee, stateDir));
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("STREAM-THREAD " + e);  // a fenced or failed thread is replaced, as apps do
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                .REPLACE_THREAD;
        });
        int code;
        try {
            streams.start();
            code = watch(bootstrap, output, groups, perGroup, deadline);
        } catch (Exception e) {
            e.printStackTrace(System.out);
            System.out.println("FAILED " + e);
            code = 1;
        }
        streams.close(Duration.ofSeconds(10));
        System.out.flush();
        System.exit(code);
    }

    static org.apache.kafka.streams.Topology topology(String input, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .selectKey((key, value) -> value.substring(0, value.indexOf(':')))
            .groupByKey()
            .count()
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    static Properties config(String bootstrap, String appId, String guarantee, String stateDir) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);  // every input record gives one output
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        p.put(StreamsConfig.topicPrefix("min.insync.replicas"), "2");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // Short timeouts, so the application rides out a dead broker in seconds, not minutes.
        p.put(StreamsConfig.TASK_TIMEOUT_MS_CONFIG, 60_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.METADATA_MAX_AGE_CONFIG), 2_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.METADATA_MAX_AGE_CONFIG), 2_000);
        p.put(StreamsConfig.REQUEST_TIMEOUT_MS_CONFIG, 5_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG), 30_000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.MAX_BLOCK_MS_CONFIG), 30_000);
        p.put(StreamsConfig.RETRY_BACKOFF_MS_CONFIG, 100);
        return p;
    }

    /** Reads OUTPUT read_committed until every group's count reached perGroup: 0, or 1 at the deadline. */
    static int watch(String bootstrap, String output, int groups, long perGroup, long deadline) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "streams-eos-watch-" + output);
        Map<String, Long> latest = new HashMap<>();
        long seen = 0, lastReport = 0;
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(p, new StringDeserializer(), new LongDeserializer())) {
            c.subscribe(List.of(output));
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200))) {
                    latest.merge(r.key(), r.value(), Math::max);
                    seen++;
                }
                if (System.currentTimeMillis() - lastReport > 1000) {
                    System.out.println("OUTPUT " + seen);
                    lastReport = System.currentTimeMillis();
                }
                if (latest.size() == groups && latest.values().stream().allMatch(n -> n >= perGroup)) {
                    System.out.println("DONE " + seen);
                    return 0;
                }
            }
        }
        System.out.println("TIMEOUT " + seen + " committed output records, latest counts " + latest);
        return 1;
    }
}
