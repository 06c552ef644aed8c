"""Kafka 4.4.0's broker configs: which may be set dynamically (DynamicBrokerConfig.AllDynamicConfigs) with
their types and defaults, and the names of the others (read-only: "Cannot update these configs
dynamically"). Taken from Kafka 4.4.0's own DescribeConfigs of a broker (read_only, config_type, value).
"""

from __future__ import annotations

# (name, ConfigType name, default) of every dynamic broker config
DYNAMIC: tuple[tuple[str, str, str | None], ...] = (
    ("background.threads", "INT", "10"),
    ("compression.gzip.level", "INT", "-1"),
    ("compression.lz4.level", "INT", "9"),
    ("compression.type", "STRING", "producer"),
    ("compression.zstd.level", "INT", "3"),
    ("config.providers", "LIST", ""),
    ("cordoned.log.dirs", "LIST", ""),
    ("errors.deadletterqueue.auto.create.topics.enable", "BOOLEAN", "false"),
    ("errors.deadletterqueue.topic.name.prefix", "STRING", "dlq."),
    ("follower.fetch.last.tiered.offset.enable", "BOOLEAN", "false"),
    ("group.consumer.assignment.interval.ms", "INT", "1000"),
    ("group.coordinator.cached.buffer.max.bytes", "INT", "1048588"),
    ("group.share.assignment.interval.ms", "INT", "1000"),
    ("group.streams.assignment.interval.ms", "INT", "1000"),
    ("listener.security.protocol.map", "STRING", None),
    ("listeners", "LIST", None),
    ("log.cleaner.backoff.ms", "LONG", "15000"),
    ("log.cleaner.dedupe.buffer.size", "LONG", "134217728"),
    ("log.cleaner.delete.retention.ms", "LONG", "86400000"),
    ("log.cleaner.io.buffer.load.factor", "DOUBLE", "0.9"),
    ("log.cleaner.io.buffer.size", "INT", "524288"),
    ("log.cleaner.io.max.bytes.per.second", "DOUBLE", "1.7976931348623157E308"),
    ("log.cleaner.max.compaction.lag.ms", "LONG", "9223372036854775807"),
    ("log.cleaner.min.cleanable.ratio", "DOUBLE", "0.5"),
    ("log.cleaner.min.compaction.lag.ms", "LONG", "0"),
    ("log.cleaner.threads", "INT", "1"),
    ("log.cleanup.policy", "LIST", "delete"),
    ("log.flush.interval.messages", "LONG", "9223372036854775807"),
    ("log.flush.interval.ms", "LONG", None),
    ("log.index.interval.bytes", "INT", "4096"),
    ("log.index.size.max.bytes", "INT", "10485760"),
    ("log.local.retention.bytes", "LONG", "-2"),
    ("log.local.retention.ms", "LONG", "-2"),
    ("log.message.timestamp.after.max.ms", "LONG", "3600000"),
    ("log.message.timestamp.before.max.ms", "LONG", "9223372036854775807"),
    ("log.message.timestamp.type", "STRING", "CreateTime"),
    ("log.preallocate", "BOOLEAN", "false"),
    ("log.remote.copy.lag.bytes", "LONG", "-1"),
    ("log.remote.copy.lag.ms", "LONG", "0"),
    ("log.retention.bytes", "LONG", "-1"),
    ("log.retention.ms", "LONG", None),
    ("log.roll.jitter.ms", "LONG", None),
    ("log.roll.ms", "LONG", None),
    ("log.segment.bytes", "INT", "1073741824"),
    ("log.segment.delete.delay.ms", "LONG", "60000"),
    ("max.connection.creation.rate", "INT", "2147483647"),
    ("max.connections", "INT", "2147483647"),
    ("max.connections.per.ip", "INT", "2147483647"),
    ("max.connections.per.ip.overrides", "STRING", ""),
    ("max.decompressed.message.bytes", "INT", "2147483639"),
    ("message.max.bytes", "INT", "1048588"),
    ("metric.reporters", "LIST", "org.apache.kafka.common.metrics.JmxReporter"),
    ("min.insync.replicas", "INT", "1"),
    ("num.io.threads", "INT", "8"),
    ("num.network.threads", "INT", "3"),
    ("num.recovery.threads.per.data.dir", "INT", "2"),
    ("num.replica.fetchers", "INT", "1"),
    (
        "principal.builder.class",
        "CLASS",
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
    ),
    ("producer.id.expiration.ms", "INT", "86400000"),
    ("remote.fetch.max.wait.ms", "INT", "500"),
    ("remote.list.offsets.request.timeout.ms", "LONG", "30000"),
    ("remote.log.index.file.cache.total.size.bytes", "LONG", "1073741824"),
    ("remote.log.manager.copier.thread.pool.size", "INT", "10"),
    ("remote.log.manager.copy.max.bytes.per.second", "LONG", "9223372036854775807"),
    ("remote.log.manager.expiration.thread.pool.size", "INT", "10"),
    ("remote.log.manager.fetch.max.bytes.per.second", "LONG", "9223372036854775807"),
    ("remote.log.manager.follower.thread.pool.size", "INT", "2"),
    ("remote.log.reader.threads", "INT", "10"),
    ("sasl.enabled.mechanisms", "LIST", "GSSAPI"),
    ("sasl.jaas.config", "PASSWORD", None),
    ("sasl.kerberos.kinit.cmd", "STRING", "/usr/bin/kinit"),
    ("sasl.kerberos.min.time.before.relogin", "LONG", "60000"),
    ("sasl.kerberos.principal.to.local.rules", "LIST", "DEFAULT"),
    ("sasl.kerberos.service.name", "STRING", None),
    ("sasl.kerberos.ticket.renew.jitter", "DOUBLE", "0.05"),
    ("sasl.kerberos.ticket.renew.window.factor", "DOUBLE", "0.8"),
    ("sasl.login.refresh.buffer.seconds", "SHORT", "300"),
    ("sasl.login.refresh.min.period.seconds", "SHORT", "60"),
    ("sasl.login.refresh.window.factor", "DOUBLE", "0.8"),
    ("sasl.login.refresh.window.jitter", "DOUBLE", "0.05"),
    ("sasl.mechanism.inter.broker.protocol", "STRING", "GSSAPI"),
    ("share.coordinator.cached.buffer.max.bytes", "INT", "1048588"),
    ("ssl.cipher.suites", "LIST", ""),
    ("ssl.client.auth", "STRING", "none"),
    ("ssl.enabled.protocols", "LIST", "TLSv1.2,TLSv1.3"),
    ("ssl.endpoint.identification.algorithm", "STRING", "https"),
    ("ssl.engine.factory.class", "CLASS", None),
    ("ssl.key.password", "PASSWORD", None),
    ("ssl.keymanager.algorithm", "STRING", "SunX509"),
    ("ssl.keystore.certificate.chain", "PASSWORD", None),
    ("ssl.keystore.key", "PASSWORD", None),
    ("ssl.keystore.location", "STRING", None),
    ("ssl.keystore.password", "PASSWORD", None),
    ("ssl.keystore.type", "STRING", "JKS"),
    ("ssl.protocol", "STRING", "TLSv1.3"),
    ("ssl.provider", "STRING", None),
    ("ssl.secure.random.implementation", "STRING", None),
    ("ssl.trustmanager.algorithm", "STRING", "PKIX"),
    ("ssl.truststore.certificates", "PASSWORD", None),
    ("ssl.truststore.location", "STRING", None),
    ("ssl.truststore.password", "PASSWORD", None),
    ("ssl.truststore.type", "STRING", "JKS"),
    ("transaction.partition.verification.enable", "BOOLEAN", "true"),
    ("unclean.leader.election.enable", "BOOLEAN", "false"),
)

# Every other broker config Kafka knows: refused as read-only (DynamicConfig.Broker.nonDynamicProps).
_READ_ONLY_NAMES = """
    add.partitions.to.txn.retry.backoff.max.ms add.partitions.to.txn.retry.backoff.ms advertised.listeners alter.config.policy.class.name
    alter.log.dirs.replication.quota.window.num alter.log.dirs.replication.quota.window.size.seconds authorizer.class.name auto.create.topics.enable
    auto.leader.rebalance.enable broker.heartbeat.interval.ms broker.id broker.rack
    broker.session.timeout.ms client.quota.callback.class connection.failed.authentication.delay.ms connections.max.idle.ms
    connections.max.reauth.ms controlled.shutdown.enable controller.listener.names controller.quorum.append.linger.ms
    controller.quorum.auto.join.enable controller.quorum.bootstrap.servers controller.quorum.election.backoff.max.ms controller.quorum.election.timeout.ms
    controller.quorum.fetch.max.bytes controller.quorum.fetch.snapshot.max.bytes controller.quorum.fetch.timeout.ms controller.quorum.request.timeout.ms
    controller.quorum.retry.backoff.ms controller.quorum.voters controller.quota.window.num controller.quota.window.size.seconds
    controller.socket.timeout.ms create.topic.policy.class.name default.replication.factor delegation.token.expiry.check.interval.ms
    delegation.token.expiry.time.ms delegation.token.max.lifetime.ms delegation.token.secret.key delete.records.purgatory.purge.interval.requests
    delete.topic.enable early.start.listeners fetch.max.bytes fetch.purgatory.purge.interval.requests
    group.consumer.assignors group.consumer.heartbeat.interval.ms group.consumer.max.assignment.interval.ms group.consumer.max.heartbeat.interval.ms
    group.consumer.max.session.timeout.ms group.consumer.max.size group.consumer.migration.policy group.consumer.min.assignment.interval.ms
    group.consumer.min.heartbeat.interval.ms group.consumer.min.session.timeout.ms group.consumer.session.timeout.ms group.coordinator.append.linger.ms
    group.coordinator.background.threads group.coordinator.rebalance.protocols group.coordinator.threads group.initial.rebalance.delay.ms
    group.max.session.timeout.ms group.max.size group.min.session.timeout.ms group.share.assignors
    group.share.delivery.count.limit group.share.heartbeat.interval.ms group.share.max.assignment.interval.ms group.share.max.delivery.count.limit
    group.share.max.heartbeat.interval.ms group.share.max.partition.max.record.locks group.share.max.record.lock.duration.ms group.share.max.session.timeout.ms
    group.share.max.share.sessions group.share.max.size group.share.min.assignment.interval.ms group.share.min.delivery.count.limit
    group.share.min.heartbeat.interval.ms group.share.min.partition.max.record.locks group.share.min.record.lock.duration.ms group.share.min.session.timeout.ms
    group.share.partition.max.record.locks group.share.record.lock.duration.ms group.share.session.timeout.ms group.streams.assignors
    group.streams.heartbeat.interval.ms group.streams.initial.rebalance.delay.ms group.streams.max.assignment.interval.ms group.streams.max.heartbeat.interval.ms
    group.streams.max.session.timeout.ms group.streams.max.size group.streams.max.standby.replicas group.streams.min.assignment.interval.ms
    group.streams.min.heartbeat.interval.ms group.streams.min.session.timeout.ms group.streams.num.standby.replicas group.streams.rack.aware.assignment.tags
    group.streams.session.timeout.ms group.streams.topology.description.plugin.class initial.broker.registration.timeout.ms inter.broker.listener.name
    kafka.metrics.polling.interval.secs kafka.metrics.reporters leader.imbalance.check.interval.seconds log.cleaner.enable
    log.dir log.dir.failure.timeout.ms log.dirs log.flush.offset.checkpoint.interval.ms
    log.flush.scheduler.interval.ms log.flush.start.offset.checkpoint.interval.ms log.retention.check.interval.ms log.retention.hours
    log.retention.minutes log.roll.hours log.roll.jitter.hours max.incremental.fetch.session.cache.slots
    max.request.partition.size.limit metadata.log.dir metadata.log.max.record.bytes.between.snapshots metadata.log.max.snapshot.interval.ms
    metadata.log.segment.bytes metadata.log.segment.ms metadata.max.idle.interval.ms metadata.max.retention.bytes
    metadata.max.retention.ms metrics.num.samples metrics.recording.level metrics.sample.window.ms
    node.id num.partitions num.replica.alter.log.dirs.threads offset.metadata.max.bytes
    offsets.commit.timeout.ms offsets.load.buffer.size offsets.retention.check.interval.ms offsets.retention.minutes
    offsets.topic.compression.codec offsets.topic.num.partitions offsets.topic.replication.factor offsets.topic.segment.bytes
    process.roles producer.purgatory.purge.interval.requests queued.max.request.bytes queued.max.requests
    quota.window.num quota.window.size.seconds remote.log.manager.copy.quota.window.num remote.log.manager.copy.quota.window.size.seconds
    remote.log.manager.fetch.quota.window.num remote.log.manager.fetch.quota.window.size.seconds remote.log.manager.task.interval.ms remote.log.manager.thread.pool.size
    remote.log.metadata.custom.metadata.max.bytes remote.log.metadata.manager.class.name remote.log.metadata.manager.class.path remote.log.metadata.manager.impl.prefix
    remote.log.metadata.manager.listener.name remote.log.reader.max.pending.tasks remote.log.storage.manager.class.name remote.log.storage.manager.class.path
    remote.log.storage.manager.impl.prefix remote.log.storage.system.enable replica.fetch.backoff.ms replica.fetch.max.bytes
    replica.fetch.min.bytes replica.fetch.response.max.bytes replica.fetch.wait.max.ms replica.high.watermark.checkpoint.interval.ms
    replica.lag.time.max.ms replica.selector.class replica.socket.receive.buffer.bytes replica.socket.timeout.ms
    replication.quota.window.num replication.quota.window.size.seconds request.timeout.ms sasl.client.callback.handler.class
    sasl.login.callback.handler.class sasl.login.class sasl.login.connect.timeout.ms sasl.login.read.timeout.ms
    sasl.login.retry.backoff.max.ms sasl.login.retry.backoff.ms sasl.mechanism.controller.protocol sasl.oauthbearer.allow.unverified.audience
    sasl.oauthbearer.allow.unverified.issuer sasl.oauthbearer.assertion.algorithm sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.exp.seconds
    sasl.oauthbearer.assertion.claim.iss sasl.oauthbearer.assertion.claim.jti.include sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.assertion.claim.sub
    sasl.oauthbearer.assertion.file sasl.oauthbearer.assertion.private.key.file sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.template.file
    sasl.oauthbearer.client.credentials.client.id sasl.oauthbearer.client.credentials.client.secret sasl.oauthbearer.clock.skew.seconds sasl.oauthbearer.expected.audience
    sasl.oauthbearer.expected.issuer sasl.oauthbearer.jwks.endpoint.refresh.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.ms
    sasl.oauthbearer.jwks.endpoint.url sasl.oauthbearer.jwt.retriever.class sasl.oauthbearer.jwt.validator.class sasl.oauthbearer.scope
    sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name sasl.oauthbearer.token.endpoint.url sasl.server.callback.handler.class
    sasl.server.max.receive.size security.inter.broker.protocol security.providers share.coordinator.append.linger.ms
    share.coordinator.load.buffer.size share.coordinator.snapshot.update.records.per.snapshot share.coordinator.state.topic.compression.codec share.coordinator.state.topic.min.isr
    share.coordinator.state.topic.num.partitions share.coordinator.state.topic.replication.factor share.coordinator.state.topic.segment.bytes share.coordinator.threads
    share.coordinator.write.timeout.ms share.fetch.purgatory.purge.interval.requests socket.connection.setup.timeout.max.ms socket.connection.setup.timeout.ms
    socket.listen.backlog.size socket.receive.buffer.bytes socket.request.max.bytes socket.send.buffer.bytes
    ssl.allow.dn.changes ssl.allow.san.changes ssl.principal.mapping.rules telemetry.max.bytes
    transaction.abort.timed.out.transaction.cleanup.interval.ms transaction.max.timeout.ms transaction.remove.expired.transaction.cleanup.interval.ms transaction.state.log.load.buffer.size
    transaction.state.log.min.isr transaction.state.log.num.partitions transaction.state.log.replication.factor transaction.state.log.segment.bytes
    transaction.two.phase.commit.enable transactional.id.expiration.ms
"""
READ_ONLY: frozenset[str] = frozenset(_READ_ONLY_NAMES.split())
