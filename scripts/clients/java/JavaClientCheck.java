// The reference client (kafka-clients) against a cluster: admin calls, an idempotent producer with each
// compression codec, and a consumer group (classic protocol) reading it all back and committing.
// Run in Java's source-file mode with Kafka's jars (no build step):
//   java -cp "$HOME/.cache/epochkraft/peers/kafka-4.4.0/libs/*" JavaClientCheck.java HOST:PORT TOPIC
// Prints one "OK ..." line per check and exits 0, or prints the failure and exits 1.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClientCheck {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PER_CODEC = 200;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        try {
            admin(bootstrap, topic);
            produce(bootstrap, topic);
            consume(bootstrap, topic);
        } catch (Exception e) {
            e.printStackTrace(System.out);
            System.out.println("FAILED " + e);
            System.exit(1);
        }
        System.exit(0);
    }

    // Authorized operations, sorted: null (not answered) prints as "null".
    static String names(Set<AclOperation> operations) {
        if (operations == null) return "null";
        return String.join(",", operations.stream().map(Enum::name).sorted().toList());
    }

    static void admin(String bootstrap, String topic) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3))).all().get(60, TimeUnit.SECONDS);
            System.out.println("OK createTopics");
            int brokers = admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).size();
            System.out.println("OK describeCluster brokers=" + brokers);
            Set<AclOperation> clusterOps = admin.describeCluster(
                new DescribeClusterOptions().includeAuthorizedOperations(true)).authorizedOperations()
                .get(30, TimeUnit.SECONDS);
            System.out.println("OK describeCluster authorizedOperations=" + names(clusterOps));
            TopicDescription described = null;
            for (int i = 0; i < 100; i++) {  // metadata reaches every broker shortly after creation
                try {
                    described = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS)
                        .get(topic);
                    if (described.partitions().stream().allMatch(p -> p.leader() != null && p.isr().size() == 3)) {
                        break;
                    }
                } catch (java.util.concurrent.ExecutionException e) {
                    if (!(e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException)) {
                        throw e;
                    }
                }
                Thread.sleep(100);
            }
            System.out.println("OK describeTopics partitions=" + described.partitions().size()
                + " isr=" + described.partitions().get(0).isr().size());
            Set<AclOperation> topicOps = admin.describeTopics(List.of(topic),
                new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames()
                .get(30, TimeUnit.SECONDS).get(topic).authorizedOperations();
            System.out.println("OK describeTopics authorizedOperations=" + names(topicOps));
            boolean listed = false;
            for (int i = 0; i < 100 && !listed; i++) {  // each broker learns of the topic on its own time
                listed = admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic);
                if (!listed) Thread.sleep(100);
            }
            if (!listed) {
                throw new IllegalStateException("listTopics does not list " + topic);
            }
            System.out.println("OK listTopics");
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "86400000"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
            String retention = null;
            for (int i = 0; i < 100; i++) {  // the broker answering applies the change shortly after the controller
                retention = admin.describeConfigs(List.of(resource)).all().get(30, TimeUnit.SECONDS)
                    .get(resource).get("retention.ms").value();
                if (retention.equals("86400000")) break;
                Thread.sleep(100);
            }
            System.out.println("OK incrementalAlterConfigs+describeConfigs retention.ms=" + retention);
        }
    }

    static void produce(String bootstrap, String topic) throws Exception {
        for (String codec : CODECS) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("enable.idempotence", "true");
            props.put("acks", "all");
            props.put("compression.type", codec);
            props.put("linger.ms", "5");
            props.put("key.serializer", StringSerializer.class.getName());
            props.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
                List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < PER_CODEC; i++) {
                    sent.add(producer.send(new ProducerRecord<>(topic, codec + "-" + i, codec + "-value-" + i)));
                }
                producer.flush();
                for (var future : sent) {
                    future.get(60, TimeUnit.SECONDS);
                }
            }
            System.out.println("OK idempotent producer compression.type=" + codec + " records=" + PER_CODEC);
        }
    }

    static void consume(String bootstrap, String topic) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", topic + "-group");
        props.put("group.protocol", "classic");
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        int want = CODECS.length * PER_CODEC;
        Set<String> keys = new java.util.HashSet<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 90_000;
            while (keys.size() < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                    if (!record.value().equals(record.key().replaceFirst("-", "-value-"))) {
                        throw new IllegalStateException("record " + record.key() + " has value " + record.value());
                    }
                    keys.add(record.key());
                }
            }
            if (keys.size() != want) {
                throw new IllegalStateException("consumed " + keys.size() + " distinct records of " + want);
            }
            consumer.commitSync(Duration.ofSeconds(30));
            System.out.println("OK consumer group read=" + keys.size() + " assigned=" + consumer.assignment().size());
        }
        Properties adminProps = new Properties();
        adminProps.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin
                .listConsumerGroupOffsets(topic + "-group").partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            System.out.println("OK listConsumerGroupOffsets partitions=" + committed.size() + " total=" + total);
            String state = admin.describeConsumerGroups(List.of(topic + "-group")).all().get(30, TimeUnit.SECONDS)
                .get(topic + "-group").groupState().toString();
            System.out.println("OK describeConsumerGroups state=" + state);
            Set<AclOperation> groupOps = admin.describeConsumerGroups(List.of(topic + "-group"),
                new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).all()
                .get(30, TimeUnit.SECONDS).get(topic + "-group").authorizedOperations();
            System.out.println("OK describeConsumerGroups authorizedOperations=" + names(groupOps));
            admin.deleteConsumerGroups(List.of(topic + "-group")).all().get(30, TimeUnit.SECONDS);
            System.out.println("OK deleteConsumerGroups");
            admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
            System.out.println("OK deleteTopics");
        }
    }
}
