// gpuwm's stateful stages as Spark sees them: a pass-through physical node per stage that is a
// StateStoreWriter, so Spark's own progress (stateOperators), its listeners and the UI's state charts
// report the figures gpuwm sets on the node's metrics during the batch (gpuwm/spark/driver/state_ops.py).
// Compiled at first use against the running PySpark's jars by the Scala compiler PySpark ships
// (gpuwm/spark/jvm/build.py), which writes STATEFUL (the line's package of the stateful traits) and
// STORE_NAMES (4.1 on: the stores Spark's commit validation expects, none) first.
package gpuwm.spark

import java.util.UUID

import org.apache.hadoop.conf.Configuration
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.execution.streaming.state.{OperatorStateMetadata, StateSchemaValidationResult}
import STATEFUL.{StatefulOperatorCustomSumMetric, StatefulOperatorStateInfo, StateStoreWriter}

/** The marker gpuwm puts over its query, one per stateful stage: Spark's operator name, the
 *  operator id, the vnodes (Spark's shuffle partitions), gpuwm's own metric names and the
 *  query's state directory. */
case class GpuwmState(name: String, operatorId: Long, parts: Int, custom: Seq[String], stateDir: String,
                      child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def withNewChildInternal(c: LogicalPlan): LogicalPlan = copy(child = c)
}

case class GpuwmStateExec(name: String, custom: Seq[String], stateInfo: Option[StatefulOperatorStateInfo],
                          child: SparkPlan) extends UnaryExecNode with StateStoreWriter {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning = child.outputPartitioning
  override protected def doExecute(): RDD[InternalRow] = child.execute()
  override def shortName: String = name
  override protected def customStatefulOperatorMetrics =
    custom.map(n => StatefulOperatorCustomSumMetric(n, n))
  override def validateAndMaybeEvolveStateSchema(
      hadoopConf: Configuration, batchId: Long, stateSchemaVersion: Int): List[StateSchemaValidationResult] = Nil
  override def stateSchemaList(results: List[StateSchemaValidationResult],
                               old: Option[OperatorStateMetadata]): List[List[String]] = Nil
  override def shouldRunAnotherBatch(newInputWatermark: Long): Boolean = false
  STORE_NAMES
  override protected def withNewChildInternal(c: SparkPlan): SparkPlan = copy(child = c)

  /** Sets this batch's figures, ``metric=value,...`` (one py4j call a stage, on the driver, before
   *  Spark's progress reads them after the batch). */
  def report(figures: String): Unit = figures.split(",").filter(_.nonEmpty).foreach { kv =>
    val i = kv.lastIndexOf('=')
    longMetric(kv.substring(0, i)).set(kv.substring(i + 1).toLong)
  }
}

/** Plans a [[GpuwmState]] as its [[GpuwmStateExec]]; gpuwm adds it to the session's extra strategies
 *  before the query starts (a query plans in a clone of its session, which copies them). */
object GpuwmStrategy extends SparkStrategy {
  /** The marker over ``child``; ``custom``: gpuwm's metric names, comma-separated. */
  def marker(name: String, operatorId: Long, parts: Int, custom: String, stateDir: String,
             child: LogicalPlan): LogicalPlan =
    GpuwmState(name, operatorId, parts, custom.split(",").toSeq.filter(_.nonEmpty), stateDir, child)

  /** Adds this strategy to ``experimental``'s (a session's ExperimentalMethods) once. */
  def register(experimental: org.apache.spark.sql.ExperimentalMethods): Unit =
    if (!experimental.extraStrategies.contains(this)) {
      experimental.extraStrategies = experimental.extraStrategies :+ this
    }

  /** Sets the figures of the [[GpuwmStateExec]] nodes of ``plan`` (a batch's executed plan) from
   *  ``figures``, ``operatorId:metric=value,...;...``: one py4j call a batch. Returns how many it set. */
  def report(plan: SparkPlan, figures: String): Int = {
    val byId = figures.split(";").filter(_.nonEmpty).map { s =>
      val i = s.indexOf(':')
      s.substring(0, i).toLong -> s.substring(i + 1)
    }.toMap
    var n = 0
    plan.foreach {
      case node: GpuwmStateExec =>
        byId.get(node.getStateInfo.operatorId).foreach { f => node.report(f); n += 1 }
      case _ =>
    }
    n
  }

  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case GpuwmState(name, id, parts, custom, dir, child) =>
      GpuwmStateExec(name, custom, Some(StatefulOperatorStateInfo(dir, new UUID(0L, 0L), id, 0L, parts)),
        planLater(child)) :: Nil
    case _ => Nil
  }
}
