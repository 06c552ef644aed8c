// Exercises the admin APIs through sarama's ClusterAdmin: ListTopics (Metadata + DescribeConfigs),
// IncrementalAlterConfig, AlterConfig, CreatePartitions, DeleteConsumerGroupOffset, DeleteConsumerGroup,
// DescribeLogDirs, AlterPartitionReassignments and ListPartitionReassignments, on a topic "sar" it creates
// (RF 3) if absent. Usage: sarama_admin HOST:PORT[,HOST:PORT...]; exits 1 at the first failure.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

func check(what string, err error) {
	if err != nil {
		fmt.Printf("%s: FAILED %v\n", what, err)
		os.Exit(1)
	}
	fmt.Printf("%s: ok\n", what)
}

func main() {
	brokers := strings.Split(os.Args[1], ",")
	conf := sarama.NewConfig()
	conf.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(brokers, conf)
	check("NewClusterAdmin", err)
	defer admin.Close()

	err = admin.CreateTopic("sar", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 3}, false)
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		check("CreateTopic", err)
	}
	topics, err := admin.ListTopics()
	check("ListTopics", err)
	partitions := topics["sar"].NumPartitions
	fmt.Printf("  sar: partitions=%d rf=%d\n", partitions, topics["sar"].ReplicationFactor)

	two := "2"
	check("IncrementalAlterConfig", admin.IncrementalAlterConfig(sarama.TopicResource, "sar",
		map[string]sarama.IncrementalAlterConfigsEntry{"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &two}}, false))
	check("AlterConfig", admin.AlterConfig(sarama.TopicResource, "sar", map[string]*string{"min.insync.replicas": &two}, false))
	err = admin.AlterConfig(sarama.TopicResource, "sar", map[string]*string{"min.insync.replicas": nil}, false)
	fmt.Printf("AlterConfig with a null topic value refused: %v\n", err)
	group := sarama.ConfigResourceType(32) // GROUP (KIP-848)
	err = admin.IncrementalAlterConfig(group, "sar-group", map[string]sarama.IncrementalAlterConfigsEntry{
		"consumer.session.timeout.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: nil}}, false)
	fmt.Printf("IncrementalAlterConfig with a null group value refused: %v\n", err)

	check("CreatePartitions", admin.CreatePartitions("sar", partitions+1, nil, false))

	client, err := sarama.NewClient(brokers, conf)
	check("NewClient", err)
	om, err := sarama.NewOffsetManagerFromClient("sg", client)
	check("NewOffsetManager", err)
	pom, err := om.ManagePartition("sar", 0)
	check("ManagePartition", err)
	pom.MarkOffset(1, "")
	om.Commit()
	pom.Close()
	om.Close()
	check("DeleteConsumerGroupOffset", admin.DeleteConsumerGroupOffset("sg", "sar", 0))
	check("DeleteConsumerGroup", admin.DeleteConsumerGroup("sg"))

	dirs, err := admin.DescribeLogDirs([]int32{1, 2, 3})
	check("DescribeLogDirs", err)
	fmt.Printf("  brokers answering: %d\n", len(dirs))

	meta, err := admin.DescribeTopics([]string{"sar"})
	check("DescribeTopics", err)
	replicas := meta[0].Partitions[0].Replicas
	target := []int32{replicas[1], replicas[2], replicas[0]}
	check("AlterPartitionReassignments", admin.AlterPartitionReassignments("sar", [][]int32{target}))
	for i := 0; i < 50; i++ {
		status, err := admin.ListPartitionReassignments("sar", []int32{0})
		check("ListPartitionReassignments", err)
		if len(status["sar"]) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	meta, err = admin.DescribeTopics([]string{"sar"})
	check("DescribeTopics", err)
	fmt.Printf("  replicas %v -> %v (target %v)\n", replicas, meta[0].Partitions[0].Replicas, target)
}
