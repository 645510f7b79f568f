"""MuJoCo backend of the twin: the Panda from pybullet_data's URDF, our work cell around
it, a Cartesian impedance controller stepped at 500 Hz with the physics."""

from __future__ import annotations

import functools
import warnings

import fast_simplification
import mujoco  # robot_rl/__init__.py has chosen the headless GL platform by now
import numpy as np

from robot_rl.sim import panda_description as panda
from robot_rl.sim.controller import PHYSICS_DT, CartesianImpedance, ImpedanceGains
from robot_rl.geometry import matrix_to_quat
from robot_rl.sim.tasks import Layout, SceneObject, Task
from robot_rl.errors import InputError



def look_at_quat(pos, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """Quaternion of a MuJoCo camera at ``pos`` looking at ``target`` (camera looks along -z)."""
    forward = np.asarray(target, float) - np.asarray(pos, float)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    cam_up = np.cross(right, forward)
    return matrix_to_quat(np.column_stack([right, cam_up, -forward]))


def _load_panda_spec() -> mujoco.MjSpec:
    text = panda.urdf_text_with_absolute_meshes()
    compiler = '<mujoco><compiler discardvisual="false" fusestatic="false" balanceinertia="true"/></mujoco>'
    robot_tag_end = text.index(">", text.index("<robot")) + 1
    text = text[:robot_tag_end] + compiler + text[robot_tag_end:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # obj files without texture coordinates
        return mujoco.MjSpec.from_string(text)


# The URDF's visual meshes of links 1-4 carry 12-15k triangles each (56k in all), far more than
# a 64-128 px camera resolves; on a CPU rasteriser they were most of a frame's render time.
# Meshes above this many triangles are decimated to it (a 64x64 front view: 7.3 -> 2.7 ms,
# mean pixel change 0.2 of 255).
MAX_VISUAL_TRIANGLES = 1500


@functools.cache
def _decimated_visual_meshes() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Mesh name -> (vertices in the file's frame, triangles) for the meshes over the budget."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _load_panda_spec().compile()
    out = {}
    for i in range(model.nmesh):
        faces = model.mesh_face[model.mesh_faceadr[i] : model.mesh_faceadr[i] + model.mesh_facenum[i]]
        if len(faces) <= MAX_VISUAL_TRIANGLES:
            continue
        verts = model.mesh_vert[model.mesh_vertadr[i] : model.mesh_vertadr[i] + model.mesh_vertnum[i]]
        verts, faces = fast_simplification.simplify(verts.astype(np.float32), faces.astype(np.int32),
                                                    target_count=MAX_VISUAL_TRIANGLES)
        # the compiler moved the mesh to its centre of mass; undo that so it recentres it again
        rotation = np.zeros(9)
        mujoco.mju_quat2Mat(rotation, model.mesh_quat[i])
        verts = np.asarray(verts, np.float64) @ rotation.reshape(3, 3).T + model.mesh_pos[i]
        out[model.mesh(i).name] = (verts, np.asarray(faces, np.int32))
    return out


def build_spec(task: Task) -> mujoco.MjSpec:
    spec = _load_panda_spec()
    for mesh in spec.meshes:
        if mesh.name in _decimated_visual_meshes():
            verts, faces = _decimated_visual_meshes()[mesh.name]
            mesh.file, mesh.uservert, mesh.userface = "", verts.ravel(), faces.ravel()
    spec.modelname = f"robot_rl_{task.name}"
    spec.option.timestep = PHYSICS_DT
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.noslip_iterations = 0
    spec.visual.global_.offwidth = 640
    spec.visual.global_.offheight = 480
    # No multisampling: 4x MSAA on a CPU rasteriser doubles a small frame's render time
    # (64x64 front view 2.7 -> 1.1 ms with the decimated meshes).
    spec.visual.quality.offsamples = 0

    # Robot: URDF meshes are for looks only; contacts use our primitives (fast, stable grasps).
    seen_meshes: set[str] = set()
    for body in spec.bodies:
        if body.name.startswith("panda_"):
            body.gravcomp = 1.0
        for geom in list(body.geoms):
            key = f"{body.name}/{geom.meshname}"
            if key in seen_meshes:  # the URDF's duplicate collision mesh
                spec.delete(geom)
                continue
            seen_meshes.add(key)
            geom.contype, geom.conaffinity, geom.group = 0, 0, 2
            geom.rgba = [0.95, 0.95, 0.95, 1.0] if "finger" not in body.name else [0.3, 0.3, 0.3, 1.0]
    for name in panda.ARM_JOINTS:
        joint = spec.joint(name)
        joint.armature = 0.1
        joint.damping = [0.5, 0.0, 0.0]
    for name in panda.FINGER_JOINTS:
        joint = spec.joint(name)
        joint.armature = 0.05
        joint.damping = [5.0, 0.0, 0.0]

    hand = spec.body(panda.HAND_LINK)
    hand.add_geom(
        name="hand_box", type=mujoco.mjtGeom.mjGEOM_BOX, size=panda.HAND_BOX_HALF_SIZE,
        pos=panda.HAND_BOX_CENTER, rgba=[0, 0, 0, 0], group=3,
    )
    for sign, link in zip((1.0, -1.0), panda.FINGER_LINKS):
        cx, cy, cz = panda.PAD_CENTER
        spec.body(link).add_geom(
            name=f"{link}_pad", type=mujoco.mjtGeom.mjGEOM_BOX, size=panda.PAD_HALF_SIZE,
            pos=[cx, sign * cy, cz], rgba=[0.2, 0.2, 0.2, 1.0], friction=[1.5, 0.01, 0.001], condim=4,
            solref=[0.01, 1.0], group=3,
        )
    spec.add_exclude(bodyname1=panda.FINGER_LINKS[0], bodyname2=panda.FINGER_LINKS[1])
    hand.add_site(name="tcp", pos=[0, 0, panda.TCP_OFFSET_IN_HAND], size=[0.005, 0.005, 0.005], group=4)
    hand.add_site(name="ft", pos=[0, 0, 0], size=[0.005, 0.005, 0.005], group=4)
    spec.add_sensor(name="ee_force", type=mujoco.mjtSensor.mjSENS_FORCE, objtype=mujoco.mjtObj.mjOBJ_SITE, objname="ft")
    spec.add_sensor(name="ee_torque", type=mujoco.mjtSensor.mjSENS_TORQUE, objtype=mujoco.mjtObj.mjOBJ_SITE, objname="ft")
    hand.add_camera(name="wrist", pos=panda.WRIST_CAMERA_POS,
                    quat=look_at_quat(panda.WRIST_CAMERA_POS, panda.WRIST_CAMERA_TARGET, up=(1.0, 0.0, 0.0)), fovy=panda.WRIST_CAMERA_FOVY)

    for name, limit in zip(panda.ARM_JOINTS, panda.ARM_EFFORT_LIMITS):
        act = spec.add_actuator(name=f"{name}_motor", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.ctrlrange = [-limit, limit]
        act.ctrllimited = True
    grip = spec.add_actuator(name="gripper", target=panda.FINGER_JOINTS[0], trntype=mujoco.mjtTrn.mjTRN_JOINT)
    grip.set_to_position(kp=800.0, kv=20.0)
    grip.ctrlrange = [0.0, 0.04]
    grip.ctrllimited = True
    grip.forcerange = [-30.0, 30.0]
    grip.forcelimited = True

    # The work cell: a table surface at z = 0, lights, a front camera.
    world = spec.worldbody
    spec.add_texture(name="grid", type=mujoco.mjtTexture.mjTEXTURE_2D, builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
                     rgb1=[0.55, 0.45, 0.35], rgb2=[0.5, 0.4, 0.3], width=256, height=256)
    mat = spec.add_material(name="table", texrepeat=[8, 8])
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "grid"
    world.add_geom(name="table", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[1.0, 1.0, 0.05], material="table")
    # No shadows: on a CPU renderer they cost ~20x the rest of a 128x128 frame.
    world.add_light(pos=[0.5, 0.0, 1.5], dir=[0, 0, -1], diffuse=[0.8, 0.8, 0.8], castshadow=False)
    world.add_light(pos=[1.5, 0.5, 1.0], dir=[-1, -0.3, -0.6], diffuse=[0.4, 0.4, 0.4], castshadow=False)
    world.add_camera(name="front", pos=panda.FRONT_CAMERA_POS, fovy=panda.FRONT_CAMERA_FOVY,
                     quat=look_at_quat(panda.FRONT_CAMERA_POS, panda.FRONT_CAMERA_TARGET))
    world.add_camera(name="side", pos=panda.SIDE_CAMERA_POS, fovy=panda.SIDE_CAMERA_FOVY,
                     quat=look_at_quat(panda.SIDE_CAMERA_POS, panda.SIDE_CAMERA_TARGET))

    for obj in task.objects:
        _add_object(spec, obj)
        if obj.movable:
            # A held object (PegInsert's peg) is welded to the hand while the episode says so:
            # MuJoCo's soft contacts let a friction grasp creep under sustained insertion force.
            spec.add_equality(name=f"hold_{obj.name}", type=mujoco.mjtEq.mjEQ_WELD, name1=panda.HAND_LINK,
                              name2=obj.name, objtype=mujoco.mjtObj.mjOBJ_BODY, active=False, solref=[0.005, 1.0])
    return spec


def _add_object(spec: mujoco.MjSpec, obj: SceneObject) -> None:
    body = spec.worldbody.add_body(name=obj.name, mocap=not obj.movable)
    if obj.movable:
        body.add_freejoint(name=f"{obj.name}_joint")
    for i, g in enumerate(obj.geoms):
        geom = body.add_geom(
            name=f"{obj.name}_{i}", type=mujoco.mjtGeom.mjGEOM_BOX, size=g.half_size, pos=g.local_pos,
            rgba=obj.rgba, friction=[obj.friction, 0.01, 0.001], condim=4,
        )
        if not obj.collides:
            geom.contype, geom.conaffinity = 0, 0
        if obj.movable:
            geom.mass = obj.mass / len(obj.geoms)


class MujocoBackend:
    name = "mujoco"

    def __init__(self, task: Task, gains: ImpedanceGains = ImpedanceGains()):
        self.task = task
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # obj files without texture coordinates
            self.model = build_spec(task).compile()
        self.data = mujoco.MjData(self.model)
        m = self.model
        self._arm_qpos = np.array([m.jnt_qposadr[m.joint(j).id] for j in panda.ARM_JOINTS])
        self._arm_dof = np.array([m.jnt_dofadr[m.joint(j).id] for j in panda.ARM_JOINTS])
        assert np.array_equal(self._arm_dof, np.arange(7)), "arm dofs must come first"
        self._finger_qpos = np.array([m.jnt_qposadr[m.joint(j).id] for j in panda.FINGER_JOINTS])
        self._tcp = m.site("tcp").id
        self._ft = m.site("ft").id
        self._hand = m.body(panda.HAND_LINK).id
        self._force_adr = m.sensor_adr[m.sensor("ee_force").id]
        self._torque_adr = m.sensor_adr[m.sensor("ee_torque").id]
        # Views into MjData's fixed buffers, bound once for the 500 Hz loop.
        d = self.data
        self._jac_full = np.zeros((6, m.nv))
        self._jacp, self._jacr = self._jac_full[:3], self._jac_full[3:]
        self._jac_arm = self._jac_full[:, :7]
        self._qpos_arm, self._qvel_arm, self._ctrl_arm = d.qpos[:7], d.qvel[:7], d.ctrl[:7]
        self._tcp_xpos = d.site_xpos[self._tcp]
        self._tcp_xmat = d.site_xmat[self._tcp].reshape(3, 3)
        self._objects = {}
        for obj in task.objects:
            body = m.body(obj.name)
            if obj.movable:
                jnt = m.joint(f"{obj.name}_joint")
                self._objects[obj.name] = ("free", m.jnt_qposadr[jnt.id], m.jnt_dofadr[jnt.id])
            else:
                self._objects[obj.name] = ("mocap", m.body_mocapid[body.id], None)
        self.controller = CartesianImpedance(panda.ARM_EFFORT_LIMITS, gains)
        self._q_rest = np.asarray(task.home_joints, dtype=np.float64)
        self._hand_subtree_weight = m.body_subtreemass[self._hand] * np.linalg.norm(m.opt.gravity)
        # the end effector's bodies (per body id), for contact_wrench: the hand, its fingers and, while
        # held, a welded object
        self._hand_bodies = np.zeros(m.nbody, bool)
        for name in (panda.HAND_LINK, *panda.FINGER_LINKS):
            self._hand_bodies[m.body(name).id] = True
        self._in_hand = self._hand_bodies.copy()
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}

    # ---- episode set-up -------------------------------------------------------------
    def reset(self, layout: Layout) -> None:
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)  # also deactivates the hold welds (inactive by default)
        d.qpos[self._arm_qpos] = self.task.home_joints
        half = layout.gripper_width / 2
        d.qpos[self._finger_qpos] = half
        d.ctrl[7] = half if layout.held_object is None else 0.0
        for name, (pos, quat) in layout.object_poses.items():
            kind, adr, _ = self._objects[name]
            if kind == "free":
                d.qpos[adr : adr + 3] = pos
                d.qpos[adr + 3 : adr + 7] = quat
            else:
                d.mocap_pos[adr] = pos
                d.mocap_quat[adr] = quat
        self._in_hand = self._hand_bodies.copy()
        if layout.held_object is not None:
            self._hold(layout.held_object)
            self._in_hand[m.body(layout.held_object).id] = True
        mujoco.mj_forward(m, d)

    def _hold(self, name: str) -> None:
        """Activate the weld between the hand and ``name`` at their current relative pose."""
        m, d = self.model, self.data
        mujoco.mj_kinematics(m, d)
        eq = m.equality(f"hold_{name}").id
        hand_pos, hand_quat = d.xpos[self._hand], d.xquat[self._hand]
        obj = m.body(name).id
        inv = np.zeros(4)
        mujoco.mju_negQuat(inv, hand_quat)
        rel_pos, rel_quat = np.zeros(3), np.zeros(4)
        mujoco.mju_rotVecQuat(rel_pos, d.xpos[obj] - hand_pos, inv)
        mujoco.mju_mulQuat(rel_quat, inv, d.xquat[obj])
        # eq_data for a weld: anchor (3), relative pose of body2 in body1 (pos 3, quat 4), torque scale.
        m.eq_data[eq, 0:3] = 0.0
        m.eq_data[eq, 3:6] = rel_pos
        m.eq_data[eq, 6:10] = rel_quat
        m.eq_data[eq, 10] = 1.0
        d.eq_active[eq] = 1

    # ---- control ----------------------------------------------------------------------
    def step(self, target_pos, target_rot, gripper_width_target, n_substeps: int,
             track_peak_wrench: bool = False) -> np.ndarray | None:
        """One control period. ``track_peak_wrench``: also return the magnitude of the external
        wrench per axis (x y z force, x y z torque) that the twin's collision reflex compares: the
        mean over the period's 500 Hz physics steps of ``contact_wrench``, so a press held through
        the period counts and a contact's first millisecond of impact does not (PyBullet's backend
        reads the same mean)."""
        m, d = self.model, self.data
        d.ctrl[7] = np.clip(gripper_width_target / 2, 0.0, 0.04)
        jacp, jacr, jac, tcp = self._jacp, self._jacr, self._jac_arm, self._tcp
        qpos, qvel, ctrl, xpos, xmat = self._qpos_arm, self._qvel_arm, self._ctrl_arm, self._tcp_xpos, self._tcp_xmat
        torques = self.controller.torques
        step1, step2, jac_site = mujoco.mj_step1, mujoco.mj_step2, mujoco.mj_jacSite
        jac_site(m, d, jacp, jacr, tcp)
        self.controller.update_nullspace(jac, self._q_rest)
        total = np.zeros(6) if track_peak_wrench else None
        for _ in range(n_substeps):
            step1(m, d)  # kinematics of the current state
            jac_site(m, d, jacp, jacr, tcp)
            torques(jac, qpos, qvel, xpos, xmat, target_pos, target_rot, out=ctrl)
            step2(m, d)  # ends with the force sensors read for this substep
            if total is not None:
                total += self.contact_wrench()
        mujoco.mj_forward(m, d)  # observations reflect the state after the last step
        return None if total is None else np.abs(total / n_substeps)

    # ---- measurements -----------------------------------------------------------------
    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.site_xpos[self._tcp].copy(), self.data.site_xmat[self._tcp].reshape(3, 3).copy()

    def tcp_velocity(self) -> tuple[np.ndarray, np.ndarray]:
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_SITE, self._tcp, vel, 0)
        return vel[3:].copy(), vel[:3].copy()  # linear, angular (world frame)

    def gripper_width(self) -> float:
        return float(np.sum(self.data.qpos[self._finger_qpos]))

    def wrench(self) -> tuple[np.ndarray, np.ndarray]:
        """External force/torque on the hand (base frame): the wrist F/T reading with the
        hand's own weight removed, like the Franka's estimate of the external wrench."""
        d = self.data
        rot = d.site_xmat[self._ft].reshape(3, 3)
        force = rot @ d.sensordata[self._force_adr : self._force_adr + 3]
        torque = rot @ d.sensordata[self._torque_adr : self._torque_adr + 3]
        # At rest the sensor reads the support of the hand subtree's weight (+z at its COM).
        support = np.array([0.0, 0.0, self._hand_subtree_weight])
        lever = d.subtree_com[self._hand] - d.site_xpos[self._ft]
        return -(force - support), -(torque - np.cross(lever, support))

    def contact_wrench(self) -> np.ndarray:
        """The external wrench on the end effector from its contacts alone (x y z force, then
        torque about the wrist; base frame): what touches the hand, the fingers or an object
        welded to the hand, from anything else. A Franka's reflex watches its model-based estimate
        of the external wrench, which leaves out the arm's and the hand's own inertia; the wrist
        F/T reading of ``wrench`` has the hand's inertia in it (up to ~12 N along an axis in free
        space as a control period's target jumps 3 cm), so the reflex reads the contacts."""
        m, d = self.model, self.data
        out = np.zeros(6)
        n = d.ncon
        if n == 0:
            return out
        contact = d.contact
        in_hand = self._in_hand[m.geom_bodyid[contact.geom[:n]]]
        touching = (in_hand[:, 0] != in_hand[:, 1]) & (contact.efc_address[:n] >= 0)
        if not touching.any():
            return out
        adr = contact.efc_address[:n][touching]
        frame = contact.frame[:n][touching]
        # elliptic cones: efc_force holds the normal force, then the two tangential ones, in the contact frame
        local = np.stack([d.efc_force[adr], d.efc_force[adr + 1], d.efc_force[adr + 2]], axis=1)
        local[contact.dim[:n][touching] < 3, 1:] = 0.0
        force = np.einsum("ci,cij->cj", local, frame.reshape(-1, 3, 3))
        # the force is geom1's on geom2: on the hand as geom2 as it is, as geom1 the reaction
        force[in_hand[touching, 0]] *= -1.0
        out[:3] = force.sum(axis=0)
        out[3:] = np.cross(contact.pos[:n][touching] - d.site_xpos[self._ft], force).sum(axis=0)
        return out

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        d = self.data
        out = {}
        for name, (kind, adr, _) in self._objects.items():
            if kind == "free":
                out[name] = (d.qpos[adr : adr + 3].copy(), d.qpos[adr + 3 : adr + 7].copy())
            else:
                out[name] = (d.mocap_pos[adr].copy(), d.mocap_quat[adr].copy())
        return out

    def joint_state(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Arm and finger joint names, positions and velocities (as a JointState carries them)."""
        d, m = self.data, self.model
        names = list(panda.ARM_JOINTS) + list(panda.FINGER_JOINTS)
        dofs = [m.jnt_dofadr[m.joint(j).id] for j in names]
        qpos = np.concatenate([d.qpos[self._arm_qpos], d.qpos[self._finger_qpos]])
        return names, qpos.copy(), d.qvel[dofs].copy()

    def get_scene_state(self) -> np.ndarray:
        """qpos + mocap poses: all a renderer of the same task needs to draw this instant."""
        d = self.data
        return np.concatenate([d.qpos, d.mocap_pos.ravel(), d.mocap_quat.ravel()])

    def set_scene_state(self, state: np.ndarray) -> None:
        """Pose every body as ``get_scene_state`` of another instance of the same task saw it."""
        m, d = self.model, self.data
        state = np.asarray(state, np.float64)
        expected = m.nq + 7 * m.nmocap
        if state.shape != (expected,):
            raise InputError(f"scene state has {state.shape} values, this scene needs {expected}")
        d.qpos[:] = state[: m.nq]
        d.mocap_pos[:] = state[m.nq : m.nq + 3 * m.nmocap].reshape(-1, 3)
        d.mocap_quat[:] = state[m.nq + 3 * m.nmocap :].reshape(-1, 4)
        mujoco.mj_kinematics(m, d)
        mujoco.mj_camlight(m, d)  # the wrist camera moves with the hand

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        renderer = self._renderers.get((height, width))
        if renderer is None:
            renderer = self._renderers[(height, width)] = mujoco.Renderer(self.model, height, width)
        renderer.update_scene(self.data, camera=camera)
        return renderer.render()

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
