# Regenerates bins/tests/alerts/*.test.yaml from the cases below, taking the expected annotations
# from the rule files (labels, values and times are the cases' own). Run from the repository root:
#   python3 bins/tests/alerts/generate.py
import yaml, re, sys, os
ALERTS = 'charts/nodemgr/files/alerts'
OUT = 'bins/tests/alerts'
def rules(file):
    d = yaml.safe_load(open(f'{ALERTS}/{file}'))
    return [r for g in d['groups'] for r in g['rules']]
def render(text, labels, value):
    text = re.sub(r'\{\{ \$labels\.(\w+) \}\}', lambda m: labels[m.group(1)], text)
    text = text.replace('{{ $value }}', value)
    return text
def alert(file, name, index, labels, value=''):
    rs = [r for r in rules(file) if r['alert'] == name]
    r = rs[index]
    all_labels = dict(r.get('labels', {}))
    all_labels.update(labels)
    return {'exp_labels': all_labels,
            'exp_annotations': {k: render(v, labels, value) for k, v in r['annotations'].items()}}
def write(file, tests, comment):
    doc = {'rule_files': [f'../../../{ALERTS}/{file}'], 'evaluation_interval': '1m', 'tests': tests}
    with open(f'{OUT}/{file.replace(".yaml", ".test.yaml")}', 'w') as f:
        f.write(comment)
        yaml.safe_dump(doc, f, sort_keys=False, width=1000)
ready = lambda node: {'series': f'kube_node_status_condition{{node="{node}",condition="Ready",status="true"}}', 'values': '1x200'}
status = lambda node, group, s, values: {'series': f'node_group_node_status{{node="{node}",node_group="{group}",status="{s}"}}', 'values': values}

# node-update
F = 'node-update.yaml'
tests = [
 {'interval': '1m', 'input_series': [
    status('w-1','worker','ToBeUpdated','1x30'), ready('w-1'),
    status('w-2','worker','ToBeUpdated','1x30'),  # not Ready: no alert
    {'series': 'kube_node_status_condition{node="w-2",condition="Ready",status="true"}', 'values': '0x30'},
    status('w-3','worker','ToBeUpdated','0x30'), ready('w-3'),  # one-hot 0: not in the status
  ], 'alert_rule_test': [
    {'eval_time': '4m', 'alertname': 'D8NodeIsNotUpdating', 'exp_alerts': []},
    {'eval_time': '6m', 'alertname': 'D8NodeIsNotUpdating', 'exp_alerts': [alert(F,'D8NodeIsNotUpdating',0,{'node':'w-1','node_group':'worker'})]},
  ]},
 {'interval': '1m', 'input_series': [
    status('w-1','worker','Approved','1x30'), ready('w-1'),
    status('w-2','worker','DisruptionApproved','1x30'),
  ], 'alert_rule_test': [
    {'eval_time': '9m', 'alertname': 'D8NodeIsNotUpdating', 'exp_alerts': []},
    {'eval_time': '11m', 'alertname': 'D8NodeIsNotUpdating', 'exp_alerts': [alert(F,'D8NodeIsNotUpdating',1,{'node':'w-1','node_group':'worker'})]},
    {'eval_time': '21m', 'alertname': 'D8NodeIsNotUpdating', 'exp_alerts': [
        alert(F,'D8NodeIsNotUpdating',1,{'node':'w-1','node_group':'worker'}),
        alert(F,'D8NodeIsNotUpdating',2,{'node':'w-2','node_group':'worker'})]},
  ]},
 {'interval': '1m', 'input_series': [
    status('w-1','worker','WaitingForDisruptionApproval','1x10 0x10'),
    status('w-2','worker','WaitingForManualDisruptionApproval','1x10'),
  ], 'alert_rule_test': [
    {'eval_time': '4m', 'alertname': 'D8NodeUpdateStuckWaitingForDisruptionApproval', 'exp_alerts': []},
    {'eval_time': '6m', 'alertname': 'D8NodeUpdateStuckWaitingForDisruptionApproval', 'exp_alerts': [alert(F,'D8NodeUpdateStuckWaitingForDisruptionApproval',0,{'node':'w-1','node_group':'worker'})]},
    {'eval_time': '15m', 'alertname': 'D8NodeUpdateStuckWaitingForDisruptionApproval', 'exp_alerts': []},
    {'eval_time': '17m', 'alertname': 'NodeRequiresDisruptionApprovalForUpdate', 'exp_alerts': []},
    {'eval_time': '0m', 'alertname': 'NodeRequiresDisruptionApprovalForUpdate', 'exp_alerts': [alert(F,'NodeRequiresDisruptionApprovalForUpdate',0,{'node':'w-2','node_group':'worker'})]},
  ]},
 {'interval': '1m', 'input_series': [
    status('a-1','stuck','WaitingForApproval','1x20'),
    status('b-1','moving','WaitingForApproval','1x20'),
    status('b-2','moving','Approved','1x20'),
  ], 'alert_rule_test': [
    {'eval_time': '4m', 'alertname': 'D8NodeGroupIsNotUpdating', 'exp_alerts': []},
    {'eval_time': '6m', 'alertname': 'D8NodeGroupIsNotUpdating', 'exp_alerts': [alert(F,'D8NodeGroupIsNotUpdating',0,{'node_group':'stuck'})]},
  ]},
 {'interval': '1m', 'input_series': [
    status('w-1','worker','DrainingForDisruption','1x200'),
    status('w-2','worker','DrainingForDisruption','1x60 0x140'),
  ], 'alert_rule_test': [
    {'eval_time': '110m', 'alertname': 'NodeStuckInDrainingForDisruptionDuringUpdate', 'exp_alerts': []},
    {'eval_time': '130m', 'alertname': 'NodeStuckInDrainingForDisruptionDuringUpdate', 'exp_alerts': [alert(F,'NodeStuckInDrainingForDisruptionDuringUpdate',0,{'node':'w-1','node_group':'worker'})]},
  ]},
 {'interval': '1m', 'input_series': [
    {'series': 'd8_node_draining{node="w-1",message="Cannot evict pod as it would violate the pod\'s disruption budget."}', 'values': '1x40'},
    {'series': 'd8_node_draining{node="w-2",message="refused"}', 'values': '1x10'},
  ], 'alert_rule_test': [
    {'eval_time': '29m', 'alertname': 'NodemgrNodeDrainRefused', 'exp_alerts': []},
    {'eval_time': '31m', 'alertname': 'NodemgrNodeDrainRefused', 'exp_alerts': [alert(F,'NodemgrNodeDrainRefused',0,{'node':'w-1','message':"Cannot evict pod as it would violate the pod's disruption budget."})]},
  ]},
]
write(F, tests, '# promtool test rules: charts/nodemgr/files/alerts/node-update.yaml (run by bins/tests/alerts.rs).\n')

F = 'node-group.yaml'
g = lambda m, group, values: {'series': f'd8_node_group_{m}{{node_group_name="{group}"}}', 'values': values}
tests = [
 {'interval': '5m', 'input_series': [
    g('desired','short','3x20'), g('ready','short','2x20'),
    g('desired','fine','3x20'), g('ready','fine','3x20'),
    g('desired','dead','2x20'), g('ready','dead','0x20'),
  ], 'alert_rule_test': [
    {'eval_time': '15m', 'alertname': 'NodeGroupReplicasUnavailable', 'exp_alerts': []},
    {'eval_time': '25m', 'alertname': 'NodeGroupReplicasUnavailable', 'exp_alerts': [alert(F,'NodeGroupReplicasUnavailable',1,{'node_group_name':'dead'})]},
    {'eval_time': '65m', 'alertname': 'NodeGroupReplicasUnavailable', 'exp_alerts': [
        alert(F,'NodeGroupReplicasUnavailable',0,{'node_group_name':'dead'},'2'),
        alert(F,'NodeGroupReplicasUnavailable',0,{'node_group_name':'short'},'1'),
        alert(F,'NodeGroupReplicasUnavailable',1,{'node_group_name':'dead'})]},
  ]},
 {'interval': '1m', 'input_series': [
    g('has_errors','broken','1x20'), g('has_errors','fine','0x20'),
  ], 'alert_rule_test': [
    {'eval_time': '9m', 'alertname': 'NodeGroupHasErrors', 'exp_alerts': []},
    {'eval_time': '11m', 'alertname': 'NodeGroupHasErrors', 'exp_alerts': [alert(F,'NodeGroupHasErrors',0,{'node_group_name':'broken'})]},
  ]},
]
write(F, tests, '# promtool test rules: charts/nodemgr/files/alerts/node-group.yaml (run by bins/tests/alerts.rs).\n')

F = 'early-oom.yaml'
tests = [{'interval': '1m', 'input_series': [
    {'series': 'early_oom_psi_unavailable{node="n-1",pod="early-oom-a"}', 'values': '1x10'},
    {'series': 'early_oom_psi_unavailable{node="n-2",pod="early-oom-b"}', 'values': '0x10'},
  ], 'alert_rule_test': [
    {'eval_time': '2m', 'alertname': 'EarlyOOMPodIsNotReady', 'exp_alerts': []},
    {'eval_time': '4m', 'alertname': 'EarlyOOMPodIsNotReady', 'exp_alerts': [alert(F,'EarlyOOMPodIsNotReady',0,{'node':'n-1','pod':'early-oom-a'})]},
  ]}]
write(F, tests, '# promtool test rules: charts/nodemgr/files/alerts/early-oom.yaml (run by bins/tests/alerts.rs).\n')

F = 'static-node.yaml'
s = lambda action, group, values: {'series': f'nodemgr_static_operations_total{{node_group="{group}",action="{action}"}}', 'values': values}
tests = [{'interval': '1m', 'input_series': [
    s('bootstrap_failed','static','0+1x40'),
    s('bootstrap_failed','calm','0+0x40'),
    s('bootstrap_succeeded','calm','0+1x40'),
    s('cleanup_failed','static','0 0 0 0 0 0 0 0 0 0 5x30'),
  ], 'alert_rule_test': [
    {'eval_time': '1m', 'alertname': 'StaticInstanceBootstrapFailing', 'exp_alerts': []},
    {'eval_time': '30m', 'alertname': 'StaticInstanceBootstrapFailing', 'exp_alerts': [alert(F,'StaticInstanceBootstrapFailing',0,{'node_group':'static'},'30')]},
    {'eval_time': '5m', 'alertname': 'StaticInstanceCleanupFailing', 'exp_alerts': []},
    {'eval_time': '15m', 'alertname': 'StaticInstanceCleanupFailing', 'exp_alerts': [alert(F,'StaticInstanceCleanupFailing',0,{'node_group':'static'})]},
  ]}]
write(F, tests, '# promtool test rules: charts/nodemgr/files/alerts/static-node.yaml (run by bins/tests/alerts.rs).\n')

F = 'standby.yaml'
# full: standby configured, all taken, at max -> fires. spare: one standby node left. room:
# below max. fixed: a fixed-size group (desired = max) without standby configured (its
# standby_desired series at 0) and bare: the same without the series at all -> quiet.
# refilled: exhausted for 20 minutes, then a standby node is held again -> quiet.
tests = [{'interval': '5m', 'input_series': [
    g('standby_desired','full','2x20'), g('standby','full','0x20'), g('desired','full','6x20'), g('max','full','6x20'),
    g('standby_desired','spare','2x20'), g('standby','spare','1x20'), g('desired','spare','6x20'), g('max','spare','6x20'),
    g('standby_desired','room','2x20'), g('standby','room','0x20'), g('desired','room','2x20'), g('max','room','6x20'),
    g('standby_desired','fixed','0x20'), g('standby','fixed','0x20'), g('desired','fixed','3x20'), g('max','fixed','3x20'),
    g('standby','bare','0x20'), g('desired','bare','3x20'), g('max','bare','3x20'),
    g('standby_desired','refilled','1x20'), g('standby','refilled','0 0 0 0 1x16'), g('desired','refilled','4x20'), g('max','refilled','4x20'),
  ], 'alert_rule_test': [
    {'eval_time': '25m', 'alertname': 'NodeGroupStandbyExhausted', 'exp_alerts': []},
    {'eval_time': '35m', 'alertname': 'NodeGroupStandbyExhausted', 'exp_alerts': [alert(F,'NodeGroupStandbyExhausted',0,{'node_group_name':'full'})]},
    {'eval_time': '95m', 'alertname': 'NodeGroupStandbyExhausted', 'exp_alerts': [alert(F,'NodeGroupStandbyExhausted',0,{'node_group_name':'full'})]},
  ]}]
write(F, tests, '# promtool test rules: charts/nodemgr/files/alerts/standby.yaml (run by bins/tests/alerts.rs).\n')

F = 'fencing.yaml'
fa = lambda action, group, values: {'series': f'nodemgr_fencing_actions_total{{node_group="{group}",action="{action}"}}', 'values': values}
tests = [
 {'interval': '1m', 'input_series': [
    fa('delete_node','fenced','0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1'),
    fa('delete_pods','fenced','0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1'),
    fa('delete_node','calm','0x20'),
    fa('notify','calm','0+1x20'),
    fa('paused_stale_cache','','0 0 0 0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1'),
  ], 'alert_rule_test': [
    {'eval_time': '2m', 'alertname': 'NodemgrNodeFenced', 'exp_alerts': []},
    {'eval_time': '5m', 'alertname': 'NodemgrNodeFenced', 'exp_alerts': [alert(F,'NodemgrNodeFenced',0,{'node_group':'fenced'})]},
    {'eval_time': '5m', 'alertname': 'NodemgrFencingPausedOnStaleCache', 'exp_alerts': []},
    {'eval_time': '7m', 'alertname': 'NodemgrFencingPausedOnStaleCache', 'exp_alerts': [alert(F,'NodemgrFencingPausedOnStaleCache',0,{})]},
  ]},
 {'interval': '1m', 'input_series': [
    {'series': 'nodemgr_fencing_storm_suppressed{zone="a"}', 'values': '1x5'},
    {'series': 'nodemgr_fencing_storm_suppressed{zone="b"}', 'values': '0x5'},
    {'series': 'fencing_agent_watchdog_armed{node="n-1",pod="fa-1"}', 'values': '1x5'},
    {'series': 'fencing_agent_kubelet_alive{node="n-1",pod="fa-1"}', 'values': '0x5'},
    {'series': 'fencing_agent_watchdog_armed{node="n-2",pod="fa-2"}', 'values': '1x5'},
    {'series': 'fencing_agent_kubelet_alive{node="n-2",pod="fa-2"}', 'values': '1x5'},
    {'series': 'fencing_agent_watchdog_armed{node="n-3",pod="fa-3"}', 'values': '0x5'},
    {'series': 'fencing_agent_kubelet_alive{node="n-3",pod="fa-3"}', 'values': '0x5'},
  ], 'alert_rule_test': [
    {'eval_time': '0m', 'alertname': 'NodemgrFencingStormSuppressed', 'exp_alerts': []},
    {'eval_time': '2m', 'alertname': 'NodemgrFencingStormSuppressed', 'exp_alerts': [alert(F,'NodemgrFencingStormSuppressed',0,{'zone':'a'})]},
    {'eval_time': '0m', 'alertname': 'NodemgrFencingAgentNotFeeding', 'exp_alerts': []},
    {'eval_time': '2m', 'alertname': 'NodemgrFencingAgentNotFeeding', 'exp_alerts': [alert(F,'NodemgrFencingAgentNotFeeding',0,{'node':'n-1','pod':'fa-1'})]},
  ]},
]
write(F, tests, '# promtool test rules: charts/nodemgr/files/alerts/fencing.yaml (run by bins/tests/alerts.rs).\n')
