package unitplacement

// The reason codes of holdfast_scheduler_filter_refusals_total: a fixed set,
// where the refusals' own words name units and nodes.

// refusalClass is the metric's reason code of a unitRefusal.
func (p *placement) refusalClass(reason string) string {
	switch {
	case p.mode == warmStandby:
		return "not_warm_standby"
	case reason == ReasonNodeBeingLeft:
		return "node_being_left"
	case reason == ReasonTried:
		return "tried"
	case p.boundNode != "":
		return "bound_elsewhere"
	case p.mode == firstBinding:
		return "not_primary"
	}
	return "not_target"
}

// nodeRefusalClass is the metric's reason code of a nodeRefusal.
func nodeRefusalClass(reason string) string {
	switch reason {
	case ReasonNotReady:
		return "not_ready"
	case ReasonCordoned:
		return "cordoned"
	}
	return "untolerated_taint"
}
