// A Flink job in a local MiniCluster against a cluster: a KafkaSource reading INPUT (keyed records whose value
// is "<seq>") -> map (value "<seq>:out") -> a KafkaSink with DeliveryGuarantee.EXACTLY_ONCE writing OUTPUT
// (a transactional producer per subtask, committed when a checkpoint completes; checkpoints every second).
// It runs until a read_committed consumer of OUTPUT has seen RECORDS distinct outputs, or until the deadline.
// Compiled with Flink's jars (peers/flink/pom.xml; Flink ships its functions to the tasks by serialization,
// so they must be on the class path, not in the source launcher's memory):
//   javac -cp "$HOME/.cache/epochkraft/peers/flink-2.2.1/libs/*" -d DIR FlinkEosCheck.java
//   java -cp "DIR:$HOME/.cache/epochkraft/peers/flink-2.2.1/libs/*" FlinkEosCheck \
//       HOST:PORT INPUT OUTPUT TXN_PREFIX PARALLELISM RECORDS DEADLINE_S CHECKPOINT_DIR [RESTORE_FROM]
// RESTORE_FROM is a retained checkpoint (a chk-N directory) to resume from, after this job's JVM was killed.
// Prints "OUTPUT n" (distinct committed outputs so far) about every second, then "DONE n" and exits 0, or
// "TIMEOUT ..." / "FAILED ..." and exits 1.

import java.time.Duration;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;

public class FlinkEosCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], prefix = args[3];
        int parallelism = Integer.parseInt(args[4]);
        int records = Integer.parseInt(args[5]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[6]) * 1000;
        String checkpoints = args[7];
        String restoreFrom = args.length > 8 ? args[8] : null;
        StreamExecutionEnvironment env =
            StreamExecutionEnvironment.createLocalEnvironment(parallelism, config(checkpoints, restoreFrom));
        env.fromSource(source(bootstrap, input), WatermarkStrategy.noWatermarks(), "input")
            .map(new MarkOutput())
            .sinkTo(sink(bootstrap, output, prefix));
        int code;
        JobClient job = null;
        try {
            job = env.executeAsync("flink-eos-check");
            code = watch(bootstrap, output, records, deadline);
        } catch (Exception e) {
            e.printStackTrace(System.out);
            System.out.println("FAILED " + e);
            code = 1;
        }
        if (job != null) {
            try {
                job.cancel().get();
            } catch (Exception e) {
                System.out.println("CANCEL " + e);
            }
        }
        System.out.flush();
        System.exit(code);
    }

    static Configuration config(String checkpoints, String restoreFrom) {
        Map<String, String> c = new HashMap<>();
        c.put("execution.checkpointing.interval", "1 s");
        c.put("execution.checkpointing.dir", "file://" + checkpoints);
        c.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        c.put("restart-strategy.type", "fixed-delay");
        c.put("restart-strategy.fixed-delay.attempts", "30");
        c.put("restart-strategy.fixed-delay.delay", "1 s");
        c.put("taskmanager.memory.network.fraction", "0.05");
        if (restoreFrom != null) {
            c.put("execution.state-recovery.path", restoreFrom);
        }
        return Configuration.fromMap(c);
    }

    static KafkaSource<Tuple2<String, String>> source(String bootstrap, String input) {
        return KafkaSource.<Tuple2<String, String>>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(input)
            .setGroupId("flink-eos-" + input)
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setDeserializer(new KeyValue())
            .setProperty(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "2000")
            .setProperty(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000")
            .build();
    }

    static KafkaSink<Tuple2<String, String>> sink(String bootstrap, String output, String prefix) {
        Properties p = new Properties();
        // Below the broker's transaction.max.timeout.ms (Flink's default of an hour is refused), and short,
        // so a transaction left by a dead attempt does not hold read_committed readers for long.
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        p.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "2000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        return KafkaSink.<Tuple2<String, String>>builder()
            .setBootstrapServers(bootstrap)
            .setRecordSerializer(new ToOutput(output))
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix(prefix)
            .setKafkaProducerConfig(p)
            .build();
    }

    /** A record's key and value as strings. */
    public static class KeyValue implements KafkaRecordDeserializationSchema<Tuple2<String, String>> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<Tuple2<String, String>> out) {
            out.collect(Tuple2.of(new String(r.key(), StandardCharsets.UTF_8),
                new String(r.value(), StandardCharsets.UTF_8)));
        }

        @Override
        public TypeInformation<Tuple2<String, String>> getProducedType() {
            return Types.TUPLE(Types.STRING, Types.STRING);
        }
    }

    /** The map step: the value marked as an output, the key kept. */
    public static class MarkOutput implements MapFunction<Tuple2<String, String>, Tuple2<String, String>> {
        @Override
        public Tuple2<String, String> map(Tuple2<String, String> in) {
            return Tuple2.of(in.f0, in.f1 + ":out");
        }
    }

    /** The output record: the input's key, the marked value. */
    public static class ToOutput implements KafkaRecordSerializationSchema<Tuple2<String, String>> {
        private final String topic;

        ToOutput(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(
                Tuple2<String, String> e, KafkaRecordSerializationSchema.KafkaSinkContext context, Long timestamp) {
            return new ProducerRecord<>(topic, e.f0.getBytes(StandardCharsets.UTF_8),
                e.f1.getBytes(StandardCharsets.UTF_8));
        }
    }

    /** Reads OUTPUT read_committed until `records` distinct outputs were seen: 0, or 1 at the deadline. */
    static int watch(String bootstrap, String output, int records, long deadline) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "2000");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "flink-eos-watch-" + output);
        Set<String> seen = new HashSet<>();
        long lastReport = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(output));
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    seen.add(r.value());
                }
                if (System.currentTimeMillis() - lastReport > 1000) {
                    System.out.println("OUTPUT " + seen.size());
                    lastReport = System.currentTimeMillis();
                }
                if (seen.size() >= records) {
                    System.out.println("DONE " + seen.size());
                    return 0;
                }
            }
        }
        System.out.println("TIMEOUT " + seen.size() + " distinct committed outputs of " + records);
        return 1;
    }
}
