"""Learning-rate schedulers: MultiStepLR (MegEngine) and CosineAnnealingLR (PyTorch's formula)."""
import math
import pickle
from bisect import bisect_right

import pytest

import mge
import mge.optimizer as optim


def _opt(lrs=(0.1, 1.0)):
    groups = [{"params": [mge.Parameter([float(i)])], "lr": lr} for i, lr in enumerate(lrs)]
    return optim.SGD(groups, lr=0.5)


def _lrs(opt):
    return [g["lr"] for g in opt.param_groups]


@pytest.mark.parametrize("milestones,gamma", [([2, 4], 0.5), ([1, 3, 7], 0.1), ([], 0.3), ([0], 2.0)])
def test_multi_step_lr_sequence(milestones, gamma):
    opt = _opt()
    sched = optim.MultiStepLR(opt, milestones, gamma=gamma)
    assert sched.current_epoch == 0  # creating the scheduler performs the first step
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 1.0]
    for epoch in range(10):
        want = [base * gamma ** bisect_right(milestones, epoch) for base in (0.1, 1.0)]
        assert _lrs(opt) == pytest.approx(want, rel=1e-12)
        sched.step()
    sched.step(epoch=3)
    assert sched.current_epoch == 3
    assert _lrs(opt) == pytest.approx([b * gamma ** bisect_right(milestones, 3) for b in (0.1, 1.0)])


def test_multi_step_lr_state_dict_and_resume():
    opt = _opt()
    sched = optim.MultiStepLR(opt, [2, 4], gamma=0.5)
    for _ in range(3):
        sched.step()
    sd = sched.state_dict()
    assert sd == {"milestones": [2, 4], "gamma": 0.5, "current_epoch": 3}
    # resuming: the groups get initial_lr from a first scheduler (their keys must match the
    # saved groups'), the optimizer's state dict restores the saved initial_lr
    opt2 = _opt(lrs=(7.0, 7.0))
    with pytest.raises(ValueError, match="doesn't match the keys"):
        opt2.load_state_dict(opt.state_dict())
    optim.MultiStepLR(opt2, [2, 4], gamma=0.5)
    opt2.load_state_dict(opt.state_dict())
    assert [g["initial_lr"] for g in opt2.param_groups] == [0.1, 1.0]
    sched2 = optim.MultiStepLR(opt2, [2, 4], gamma=0.5, current_epoch=sd["current_epoch"] - 1)
    assert sched2.current_epoch == 3 and _lrs(opt2) == pytest.approx(_lrs(opt))
    sched3 = optim.MultiStepLR(_opt(), [9], gamma=0.1)
    sched3.load_state_dict(sd)
    assert sched3.milestones == [2, 4] and sched3.current_epoch == 3
    with pytest.raises(KeyError, match="key 'gamma'' is not specified in state_dict"):
        sched3.load_state_dict({"milestones": [1], "current_epoch": 0})


def test_scheduler_errors():
    with pytest.raises(ValueError, match=r"Milestones should be a list of increasing integers. Got \[4, 2\]"):
        optim.MultiStepLR(_opt(), [4, 2])
    with pytest.raises(KeyError, match=r"param 'initial_lr' is not specified in param_groups\[0\] "
                                       "when resuming an optimizer"):
        optim.MultiStepLR(_opt(), [4], current_epoch=3)
    with pytest.raises(TypeError, match="optimizer argument given to the lr_scheduler should be Optimizer"):
        optim.MultiStepLR(3, [4])
    with pytest.raises(ValueError, match="T_max should be a positive number"):
        optim.CosineAnnealingLR(_opt(), T_max=0)


def test_base_scheduler_methods_are_abstract():
    class Constant(optim.LRScheduler):
        def get_lr(self):
            return self.base_lrs

    sched = Constant(_opt())
    with pytest.raises(NotImplementedError):
        sched.state_dict()
    with pytest.raises(NotImplementedError):
        sched.load_state_dict({})
    with pytest.raises(NotImplementedError):
        optim.LRScheduler.get_lr(sched)


def _torch_cosine_recursive(base, eta_min, T_max, n):
    # torch.optim.lr_scheduler.CosineAnnealingLR.get_lr (the chainable form), written out
    lrs = [base]
    for epoch in range(1, n):
        last = lrs[-1]
        if (epoch - 1 - T_max) % (2 * T_max) == 0:
            lr = last + (base - eta_min) * (1 - math.cos(math.pi / T_max)) / 2
        else:
            lr = ((1 + math.cos(math.pi * epoch / T_max)) / (1 + math.cos(math.pi * (epoch - 1) / T_max))
                  * (last - eta_min) + eta_min)
        lrs.append(lr)
    return lrs


@pytest.mark.parametrize("T_max,eta_min", [(4, 0.0), (10, 0.001), (3, 0.05), (1, 0.0)])
def test_cosine_annealing_lr_sequence(T_max, eta_min):
    opt = _opt()
    sched = optim.CosineAnnealingLR(opt, T_max=T_max, eta_min=eta_min)
    n = 3 * T_max + 2
    got = []
    for _ in range(n):
        got.append(_lrs(opt))
        sched.step()
    for i, base in enumerate((0.1, 1.0)):
        closed = [eta_min + (base - eta_min) * (1 + math.cos(math.pi * e / T_max)) / 2 for e in range(n)]
        assert [g[i] for g in got] == pytest.approx(closed, rel=1e-9, abs=1e-12)
        assert [g[i] for g in got] == pytest.approx(_torch_cosine_recursive(base, eta_min, T_max, n),
                                                    rel=1e-9, abs=1e-12)
    assert got[T_max] == pytest.approx([eta_min, eta_min], abs=1e-12)


def test_cosine_annealing_lr_state_dict():
    opt = _opt()
    sched = optim.CosineAnnealingLR(opt, T_max=5, eta_min=0.01)
    sched.step()
    sd = sched.state_dict()
    assert sd == {"T_max": 5, "eta_min": 0.01, "current_epoch": 1}
    other = optim.CosineAnnealingLR(_opt(), T_max=9)
    other.load_state_dict(pickle.loads(pickle.dumps(sd)))
    other.step()
    sched.step()
    assert _lrs(other.optimizer) == pytest.approx(_lrs(opt))
    with pytest.raises(KeyError, match="key 'T_max''"):
        other.load_state_dict({"eta_min": 0, "current_epoch": 0})


def test_scheduler_drives_optimizer_updates():
    p = mge.Parameter([0.0])
    opt = optim.SGD([p], lr=1.0)
    sched = optim.MultiStepLR(opt, [1], gamma=0.5)
    for _ in range(3):
        p.grad = mge.tensor([1.0])
        opt.step().clear_grad()
        sched.step()
    assert p.numpy().tolist() == [-(1.0 + 0.5 + 0.5)]
