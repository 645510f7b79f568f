"""Topic and service names every node agrees on (relative: a namespace or remapping moves them),
and the QoS of each kind of traffic."""

from __future__ import annotations

# arm driver: state out
JOINT_STATES = "arm/joint_states"  # sensor_msgs/JointState
TCP_POSE = "arm/tcp_pose"  # geometry_msgs/PoseStamped, base frame
TCP_TWIST = "arm/tcp_twist"  # geometry_msgs/TwistStamped
WRENCH = "arm/wrench"  # geometry_msgs/WrenchStamped, external wrench on the end effector
GRIPPER_STATE = "arm/gripper_state"  # sensor_msgs/JointState, name ["width"], position [metres between the pads]
ARM_STATUS = "arm/status"  # std_msgs/String, JSON: mode, e-stop, counters
# arm driver: commands in
VELOCITY_COMMAND = "arm/command/velocity"  # geometry_msgs/TwistStamped (m/s, rad/s, base frame)
POSE_COMMAND = "arm/command/pose"  # geometry_msgs/PoseStamped target
GRIPPER_COMMAND = "arm/command/gripper"  # std_msgs/Float32: > 0.5 close, < -0.5 open
ESTOP = "arm/estop"  # std_msgs/Bool: True latches the e-stop
RESET = "arm/reset"  # std_srvs/Trigger: new episode (sim: new scene), arm to home
RESET_REFUSED_NO_OPERATOR = "no operator"  # how a refused reset's message starts while the operator is lost
RESET_REFUSED_ESTOP = "e-stop is latched"  # ... and while the e-stop is latched
RESET_REFUSED_WAIT = (RESET_REFUSED_NO_OPERATOR, RESET_REFUSED_ESTOP)  # the actor waits these out
RELEASE_ESTOP = "arm/release_estop"  # std_srvs/Trigger
# sim twin only
SIM_SCENE = "sim/scene"  # std_msgs/Float64MultiArray: the scene state sim cameras render
SIM_SUCCESS = "sim/success"  # std_msgs/Float64MultiArray [stamp_s, 0|1]: ground truth
SIM_OBJECTS = "sim/objects"  # std_msgs/Float64MultiArray [stamp_s, poses of the task's objects, sorted by name]


def camera_image(name: str) -> str:
    return f"cameras/{name}/image"  # sensor_msgs/Image


def camera_info(name: str) -> str:
    return f"cameras/{name}/camera_info"  # sensor_msgs/CameraInfo


# teleop (the teleop node publishes these; the actor and the arm listen)
TELEOP_ACTION = "teleop/action"  # std_msgs/Float32MultiArray: the contract action [7]
TELEOP_INTERVENING = "teleop/intervening"  # std_msgs/Bool: the human holds the controls
TELEOP_EVENTS = "teleop/events"  # std_msgs/String: one of contract.OPERATOR_EVENTS
TELEOP_HEARTBEAT = "teleop/heartbeat"  # std_msgs/Empty each teleop tick: the operator's path is alive
APPLIED_ACTION = "arm/applied_action"  # Float64MultiArray [stamp_s, action 7, by_operator 0/1] per tick
ACTOR_STATUS = "actor/status"  # std_msgs/String JSON, latched: counts, the last episode, weights version
ACTOR_STEP = "actor/step"  # std_msgs/String JSON per control step: episode, step, reward, confidence, intervening, episode_over, dropped
# learning: absolute names, so that several robots (arm, cameras and actor under a namespace
# each: robot1/arm/..., robot2/arm/...) feed one learner and one recorder
TRANSITIONS = "/learner/transitions"  # std_msgs/UInt8MultiArray: wire frames (actors -> learner)
WEIGHTS = "/learner/weights"  # std_msgs/UInt8MultiArray: wire frame, transient local (learner -> actors)
LEARNER_EVENTS = "/learner/events"  # std_msgs/UInt8MultiArray: status, checkpoint_saved, error (wire frames)
EPISODES = "/recorder/episodes"  # std_msgs/UInt8MultiArray: one finished episode per message
RECORDER_STATUS = "/recorder/status"  # std_msgs/String JSON, latched: episodes, frames, drops, handled per sender


def qos_sensor(depth: int = 2):
    """Latest-value streams (images, state): best effort would drop on loopback under load,
    so reliable with a short queue: a slow reader gets the newest frames."""
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=depth, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)


def qos_data(depth: int = 1000):
    """Transitions and episodes: reliable, bounded."""
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=depth, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)


def qos_latched():
    """Weights and the e-stop: the newest value reaches a subscriber that joins late."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)
RESET_STATE_STAMP = "state at"  # arm/reset's reply names the stamp of the episode's first state: "state at <ns> ns"
