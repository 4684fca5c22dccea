"""What the run's records mean: the rank verdict, network causes of a hang, the node report
and the merge of node reports into the cluster's."""
